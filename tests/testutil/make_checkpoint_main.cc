// moe-make-checkpoint: a small random Hugging Face checkpoint of any family
// the loader knows, in its real layout, written by the test suite's own
// checkpoint writer (tests/testutil/hf_writer) from a golden case that the
// family's config expresses. The family list is the loader's own
// (AllHfFamilies), so a family added there is offered here at once, as
// soon as one golden case fits it.
//   moe-make-checkpoint --list              # every family and form offered
//   moe-make-checkpoint FAMILY DIR [--released | --nvfp4 | --packed]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/hf_config.h"
#include "core/status_macros.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {
namespace {

// The forms beyond the plain one that each family's releases come in.
std::vector<std::string> Forms(HfFamily f) {
  switch (f) {
    case HfFamily::kGptOss:
    case HfFamily::kDeepseekV4:
    case HfFamily::kKimiK3:
      return {"--released"};  // MXFP4 routed experts, as they ship
    case HfFamily::kNemotronH:
      return {"--nvfp4"};  // the ModelOpt NVFP4 release
    default:
      return {};
  }
}

// The first golden case whose config this family expresses exactly, and
// that writes in the form asked for.
absl::Status Write(HfFamily f, const std::string& dir, HfWriteOptions o) {
  o.family = f;
  o.shards = 2;
  absl::Status last = absl::NotFoundError(absl::StrCat(
      "no golden case in ", GoldenDir(), " is expressed by ", HfFamilyName(f)));
  for (const std::string& path : GoldenFiles()) {
    auto c = LoadGoldenCase(path);
    if (!c.ok()) continue;
    bool fits = false;
    for (HfFamily g : FamiliesFor(c->config)) fits |= g == f;
    if (!fits) continue;
    absl::Status s = WriteHfCheckpoint(*c, o, dir);
    if (s.ok()) {
      std::printf(
          "wrote a random %s checkpoint (golden case %s at layer %ld) "
          "to %s\n",
          HfFamilyName(f), c->name.c_str(), static_cast<long>(o.layer),
          dir.c_str());
      return s;
    }
    last = s;
  }
  // No golden case has this family's math (Jamba's softmax without renorm,
  // Hunyuan's shared MLP always there): a random case of a small softmax
  // config the family expresses, with the reference's outputs.
  for (const bool norm : {true, false}) {
    for (const int64_t shared : {0, 32, 48, 64}) {
      MoeLayerConfig k;
      k.hidden = 64;
      k.inter = 32;
      k.num_experts = 8;
      k.top_k = 2;
      k.route_norm = norm;
      k.shared_inter = shared;
      bool fits = false;
      for (HfFamily g : FamiliesFor(k)) fits |= g == f;
      if (!fits) continue;
      const GoldenCase c = RandomCase(k, 16, 11, "random");
      MOE_RETURN_IF_ERROR(WriteHfCheckpoint(c, o, dir));
      std::printf("wrote a random %s checkpoint (a reference case at layer "
                  "%ld) to %s\n",
                  HfFamilyName(f), static_cast<long>(o.layer), dir.c_str());
      return absl::OkStatus();
    }
  }
  return last;
}

int Usage() {
  std::fprintf(stderr,
               "usage: moe-make-checkpoint --list | FAMILY DIR [--released | "
               "--nvfp4 | --packed]\n");
  return 64;
}

int Main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (HfFamily f : AllHfFamilies()) {
      std::printf("%s\n", HfFamilyName(f));
      for (const std::string& form : Forms(f)) {
        std::printf("%s %s\n", HfFamilyName(f), form.c_str());
      }
    }
    return 0;
  }
  if (argc != 3 && argc != 4) return Usage();
  const std::string name = argv[1], dir = argv[2];
  HfWriteOptions o;
  if (argc == 4) {
    const std::string form = argv[3];
    if (form == "--released") {
      o.released = true;
    } else if (form == "--nvfp4") {
      o.nvfp4_experts = true;
    } else if (form == "--packed") {
      o.layout = HfExpertLayout::kPacked;
    } else {
      return Usage();
    }
  }
  for (HfFamily f : AllHfFamilies()) {
    if (name != HfFamilyName(f)) continue;
    if (absl::Status s = Write(f, dir, o); !s.ok()) {
      std::fprintf(stderr, "moe-make-checkpoint: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr,
               "moe-make-checkpoint: unknown family '%s' (--list lists them)\n",
               name.c_str());
  return 64;
}

}  // namespace
}  // namespace moe::testing

int main(int argc, char** argv) { return moe::testing::Main(argc, argv); }
