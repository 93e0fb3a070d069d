#include "tests/testutil/small_model.h"

#include "absl/strings/str_cat.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"

namespace moe::testing {
namespace {

SyntheticArgs Args() {
  SyntheticArgs a;
  a.hidden = kSmallHidden;
  a.inter = 24;
  a.experts = 6;
  a.top_k = 2;
  a.seed = 5;
  return a;
}

}  // namespace

std::vector<std::string> SmallModelArgs() {
  const SyntheticArgs a = Args();
  return {"--synthetic",
          absl::StrCat("--hidden=", a.hidden),
          absl::StrCat("--inter=", a.inter),
          absl::StrCat("--experts=", a.experts),
          absl::StrCat("--top-k=", a.top_k),
          absl::StrCat("--seed=", a.seed)};
}

std::unique_ptr<LocalMoe> SmallModelEngine() {
  auto spec = MakeSyntheticSpec(Args());
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  auto model = MakeSyntheticModel(*spec);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto moe = LocalMoe::Create(**model, "cpu", WeightDType::kF32, 1, 64);
  EXPECT_TRUE(moe.ok()) << moe.status();
  return moe.ok() ? std::move(*moe) : nullptr;
}

}  // namespace moe::testing
