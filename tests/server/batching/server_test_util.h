// Helpers the server's unit tests share: the status each BatchRequest was
// answered with, by name, and a small synthetic model loaded for the
// router together with an engine over the same weights.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/synthetic_model.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "server/batching/batch_request.h"
#include "server/step/router_model.h"

namespace moe::testing {

// The status each request was answered with, by the name given to For.
class AnswersByName {
 public:
  std::function<void(const absl::Status&, BatchResult&)> For(
      const std::string& name) {
    return [this, name](const absl::Status& s, BatchResult&) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_TRUE(codes_.emplace(name, s.code()).second)
          << name << " answered twice";
    };
  }
  bool Has(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_.count(name) > 0;
  }
  absl::StatusCode Code(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_.at(name);
  }

 private:
  std::mutex mu_;
  std::map<std::string, absl::StatusCode> codes_;
};

// `args` on the router (every expert, CPU, up to 64 tokens a step) and the
// engine's own answer from a second copy of the same weights.
struct SmallRouterModel {
  std::unique_ptr<RouterModel> model;
  std::unique_ptr<LocalMoe> engine;
};

// Fails the test (and leaves `out` partly empty) when they cannot be built.
inline void LoadSmallRouterModel(const SyntheticArgs& args,
                                 SmallRouterModel* out) {
  auto spec = MakeSyntheticSpec(args);
  ASSERT_TRUE(spec.ok()) << spec.status();
  RouterModel::Options mo;
  mo.location.synthetic = *spec;
  mo.all_experts = true;
  mo.max_tokens = 64;
  auto model = RouterModel::Load(mo);
  ASSERT_TRUE(model.ok()) << model.status();
  out->model = std::move(*model);
  auto source = MakeSyntheticModel(*spec);
  ASSERT_TRUE(source.ok()) << source.status();
  auto engine =
      LocalMoe::Create(**source, "cpu", WeightDType::kF32, 1, /*max=*/64);
  ASSERT_TRUE(engine.ok()) << engine.status();
  out->engine = std::move(*engine);
}

}  // namespace moe::testing
