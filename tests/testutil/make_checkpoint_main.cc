// moe-make-checkpoint: a small random Hugging Face checkpoint of any family
// the loader knows, in its real layout, written by the test suite's own
// checkpoint writer (tests/testutil/hf_writer) from a golden case that the
// family's config expresses. The family list is the loader's own
// (AllHfFamilies), so a family added there is offered here at once, as
// soon as one golden case fits it.
//   moe-make-checkpoint --list              # every family and form offered
//   moe-make-checkpoint FAMILY DIR [--released | --nvfp4 | --packed |
//                       --mistral]
//                       [--case GOLDEN.safetensors] [--io FILE] [--layer L]
// --case writes that golden case (FAMILY may then be `auto`: the first
// family that expresses it); --io writes what a client needs to check the
// service against the case: x, y, the routing and the layer (see WriteIo);
// --layer puts the case at MoE layer L (default 1).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/hf_config.h"
#include "core/moe_config.h"
#include "core/safetensors.h"
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
    // Mistral's own layout: params.json and consolidated shards (Mixtral,
    // and Mistral-Large-3 as deepseek_v3).
    case HfFamily::kMixtral:
    case HfFamily::kDeepseekV3:
      return {"--mistral"};
    default:
      return {};
  }
}

// What a client checks the served checkpoint with, as one safetensors file:
// x [N, H] and y [N, H] (F32), the reference routing top_idx and top_w (in
// the golden case's shapes), token_ids [N] for a hash-routed case; metadata
// "family", "case", "layer" and "config" (the layer's MoE config as JSON).
absl::Status WriteIo(const GoldenCase& c, HfFamily f, int64_t layer,
                     const std::string& path) {
  const int64_t h = c.config.hidden;
  SafetensorsWriter w;
  w.AddF32("x", {c.tokens, h}, c.x);
  w.AddF32("y", {c.tokens, h}, c.y);
  if (!c.top_idx.empty()) {
    w.AddI64("top_idx", c.top_shape, c.top_idx);
    w.AddF32("top_w", c.top_shape, c.top_w);
  }
  if (!c.token_ids.empty()) w.AddI64("token_ids", {c.tokens}, c.token_ids);
  w.SetMetadata("family", HfFamilyName(f));
  w.SetMetadata("case", c.name);
  w.SetMetadata("layer", absl::StrCat(layer));
  w.SetMetadata("config", MoeLayerConfigToJson(c.config));
  return w.WriteFile(path);
}

bool Expresses(HfFamily f, const MoeLayerConfig& c) {
  for (HfFamily g : FamiliesFor(c)) {
    if (g == f) return true;
  }
  return false;
}

// Whether `c` is worth writing in `o`'s form of `f`: its config.json says
// it, or the form is Mistral's, whose writer checks its own params.json.
bool Candidate(HfFamily f, const HfWriteOptions& o, const MoeLayerConfig& c) {
  return o.layout == HfExpertLayout::kConsolidated || Expresses(f, c);
}

absl::Status WriteCase(const GoldenCase& c, HfFamily f, const std::string& dir,
                       const HfWriteOptions& o, const std::string& io,
                       const char* what) {
  MOE_RETURN_IF_ERROR(WriteHfCheckpoint(c, o, dir));
  if (!io.empty()) MOE_RETURN_IF_ERROR(WriteIo(c, f, o.layer, io));
  std::printf("wrote a random %s checkpoint (%s %s at layer %ld) to %s\n",
              HfFamilyName(f), what, c.name.c_str(), static_cast<long>(o.layer),
              dir.c_str());
  return absl::OkStatus();
}

// The golden case at `case_path` as family `f`.
absl::Status WriteGiven(HfFamily f, const std::string& dir, HfWriteOptions o,
                        const std::string& case_path, const std::string& io) {
  o.family = f;
  o.shards = 2;
  MOE_ASSIGN_OR_RETURN(GoldenCase c, LoadGoldenCase(case_path));
  if (!Candidate(f, o, c.config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--case ", case_path, ": ", HfFamilyName(f),
                     "'s config.json does not express this case"));
  }
  return WriteCase(c, f, dir, o, io, "golden case");
}

// The first golden case whose config this family expresses exactly, and
// that writes in the form asked for.
absl::Status Write(HfFamily f, const std::string& dir, HfWriteOptions o,
                   const std::string& io) {
  o.family = f;
  o.shards = 2;
  absl::Status last = absl::NotFoundError(absl::StrCat(
      "no golden case in ", GoldenDir(), " is expressed by ", HfFamilyName(f)));
  for (const std::string& path : GoldenFiles()) {
    auto c = LoadGoldenCase(path);
    if (!c.ok() || !Candidate(f, o, c->config)) continue;
    absl::Status s = WriteCase(*c, f, dir, o, io, "golden case");
    if (s.ok()) return s;
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
      if (!Candidate(f, o, k)) continue;
      const GoldenCase c = RandomCase(k, 16, 11, "random");
      // A form may not express it (Mistral-Large-3 always has a shared
      // expert): the next one.
      absl::Status s = WriteCase(c, f, dir, o, io, "reference case");
      if (s.ok()) return s;
      last = s;
    }
  }
  return last;
}

int Usage() {
  std::fprintf(stderr,
               "usage: moe-make-checkpoint --list | FAMILY DIR [--released | "
               "--nvfp4 | --packed | --mistral] [--case GOLDEN.safetensors] "
               "[--io FILE] "
               "[--layer L]\n"
               "  FAMILY may be 'auto' with --case: the first family that "
               "expresses the case\n");
  return 64;
}

absl::StatusOr<HfFamily> FamilyNamed(const std::string& name,
                                     const std::string& case_path) {
  if (name == "auto") {
    if (case_path.empty()) {
      return absl::InvalidArgumentError("FAMILY 'auto' needs --case");
    }
    MOE_ASSIGN_OR_RETURN(GoldenCase c, LoadGoldenCase(case_path));
    const std::vector<HfFamily> fits = FamiliesFor(c.config);
    if (fits.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "--case ", case_path, ": no family's config.json expresses it"));
    }
    return fits.front();
  }
  for (HfFamily f : AllHfFamilies()) {
    if (name == HfFamilyName(f)) return f;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown family '", name, "' (--list lists them)"));
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
  if (argc < 3) return Usage();
  const std::string name = argv[1], dir = argv[2];
  HfWriteOptions o;
  std::string case_path, io;
  bool form_given = false;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool form = arg == "--released" || arg == "--nvfp4" ||
                      arg == "--packed" || arg == "--mistral";
    if (form && form_given) return Usage();
    form_given |= form;
    if (arg == "--released") {
      o.released = true;
    } else if (arg == "--nvfp4") {
      o.nvfp4_experts = true;
    } else if (arg == "--packed") {
      o.layout = HfExpertLayout::kPacked;
    } else if (arg == "--mistral") {
      o.layout = HfExpertLayout::kConsolidated;
    } else if ((arg == "--case" || arg == "--io") && i + 1 < argc) {
      (arg == "--case" ? case_path : io) = argv[++i];
    } else if (arg == "--layer" && i + 1 < argc &&
               absl::SimpleAtoi(argv[i + 1], &o.layer) && o.layer >= 0) {
      ++i;
    } else {
      return Usage();
    }
  }
  absl::StatusOr<HfFamily> f = FamilyNamed(name, case_path);
  absl::Status s = f.status();
  if (s.ok()) {
    s = case_path.empty() ? Write(*f, dir, o, io)
                          : WriteGiven(*f, dir, o, case_path, io);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "moe-make-checkpoint: %s\n",
                 std::string(s.message()).c_str());
    return f.ok() ? 1 : 64;  // no such family: a usage error
  }
  return 0;
}

}  // namespace
}  // namespace moe::testing

int main(int argc, char** argv) { return moe::testing::Main(argc, argv); }
