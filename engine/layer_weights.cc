#include "engine/layer_weights.h"

#include <omp.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/weight_values.h"

namespace moe {
namespace {

namespace kc = kernels::cpu;

// Packs a weight whose rows are picked from up to two source matrices
// (fused gate/up) by `order`: >= 0 row of a, -1-r row r of b, INT64_MIN zero.
template <typename T>
void PackOrdered(const T* a, const T* b, int64_t row_len,
                 const std::vector<int64_t>& order, int64_t k, T* packed) {
  std::vector<const T*> rows(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t o = order[i];
    rows[i] = o == INT64_MIN ? nullptr
              : o >= 0       ? a + o * row_len
                             : b + (-1 - o) * row_len;
  }
  if constexpr (std::is_same_v<T, float>) {
    kc::PackRowsF32(rows.data(), static_cast<int64_t>(rows.size()), k, row_len,
                    packed);
  } else {
    kc::PackRowsBF16(rows.data(), static_cast<int64_t>(rows.size()), k, row_len,
                     packed);
  }
}

std::vector<int64_t> IdentityOrder(int64_t n) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

template <typename T>
absl::StatusOr<PackedWeight> PackTyped(const WeightTensor* a,
                                       const WeightTensor* b, int64_t row_len,
                                       const std::vector<int64_t>& order,
                                       int64_t k, kc::WeightFormat format) {
  PackedWeight p;
  p.format = format;
  p.n = static_cast<int64_t>(order.size());
  p.k = k;
  p.data = AlignedBuffer(kc::PackedElements(p.n, k) * sizeof(T));
  if (!p.data.allocated()) {
    return absl::ResourceExhaustedError("out of memory packing weights");
  }
  WeightValues<T> va, vb;
  if constexpr (std::is_same_v<T, float>) {
    MOE_ASSIGN_OR_RETURN(va, WeightsAsF32(*a));
    if (b != nullptr) {
      MOE_ASSIGN_OR_RETURN(vb, WeightsAsF32(*b));
    }
  } else {
    MOE_ASSIGN_OR_RETURN(va, WeightsAsBf16(*a));
    if (b != nullptr) {
      MOE_ASSIGN_OR_RETURN(vb, WeightsAsBf16(*b));
    }
  }
  PackOrdered<T>(va.data, vb.data, row_len, order, k,
                 reinterpret_cast<T*>(p.data.data()));
  return p;
}

// FP8 and MXFP4 alike: each output row's codes and scales, picked by
// `order` like the float rows (o >= 0: row o of `a`; o < 0: row -1 - o of
// `b`; INT64_MIN: a padding row), then packed by the format's kernel.
template <typename Values, typename Scale, typename AsValues, typename Codes,
          typename PackRows>
absl::StatusOr<PackedWeight> PackQuantised(
    kc::WeightFormat format, AsValues as_values, Codes row_codes,
    PackRows pack_rows, const WeightTensor* a, const WeightTensor* b,
    int64_t row_len, const std::vector<int64_t>& order, int64_t k) {
  PackedWeight p;
  p.format = format;
  p.n = static_cast<int64_t>(order.size());
  p.k = k;
  p.data = AlignedBuffer(kc::PackedBytes(p.format, p.n, k));
  if (!p.data.allocated()) {
    return absl::ResourceExhaustedError("out of memory packing weights");
  }
  Values va, vb;
  MOE_ASSIGN_OR_RETURN(va, as_values(*a));
  if (b != nullptr) {
    MOE_ASSIGN_OR_RETURN(vb, as_values(*b));
  }
  std::vector<const uint8_t*> rows(order.size(), nullptr);
  std::vector<const Scale*> scales(order.size(), nullptr);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t o = order[i];
    if (o == INT64_MIN) continue;
    const Values& v = o >= 0 ? va : vb;
    const int64_t r = o >= 0 ? o : -1 - o;
    rows[i] = row_codes(v, r);
    scales[i] = v.row_scales(r);
  }
  pack_rows(rows.data(), scales.data(), p.n, k, row_len, p.data.data());
  return p;
}

// FP8: e4m3 codes and their fp32 block scales.
absl::StatusOr<PackedWeight> PackFp8(const WeightTensor* a,
                                     const WeightTensor* b, int64_t row_len,
                                     const std::vector<int64_t>& order,
                                     int64_t k) {
  return PackQuantised<Fp8Values, float>(
      kc::WeightFormat::kFP8, WeightsAsFp8,
      [row_len](const Fp8Values& v, int64_t r) {
        return v.codes + r * row_len;
      },
      kc::PackRowsFP8, a, b, row_len, order, k);
}

// MXFP4: E2M1 code pairs and E8M0 scales.
absl::StatusOr<PackedWeight> PackMxfp4(const WeightTensor* a,
                                       const WeightTensor* b, int64_t row_len,
                                       const std::vector<int64_t>& order,
                                       int64_t k) {
  return PackQuantised<Mxfp4Values, uint8_t>(
      kc::WeightFormat::kMXFP4, WeightsAsMxfp4,
      [](const Mxfp4Values& v, int64_t r) { return v.row_pairs(r); },
      kc::PackRowsMXFP4, a, b, row_len, order, k);
}

// NVFP4: E2M1 code pairs, E4M3 scales and each row's tensor global scale
// (gate and up rows of a fused weight carry their own).
absl::StatusOr<PackedWeight> PackNvfp4(const WeightTensor* a,
                                       const WeightTensor* b, int64_t row_len,
                                       const std::vector<int64_t>& order,
                                       int64_t k) {
  float global_a = 0.0f, global_b = 0.0f;
  std::vector<float> globals(order.size(), 0.0f);
  return PackQuantised<Nvfp4Values, uint8_t>(
      kc::WeightFormat::kNVFP4,
      [&](const WeightTensor& t) -> absl::StatusOr<Nvfp4Values> {
        MOE_ASSIGN_OR_RETURN(Nvfp4Values v, WeightsAsNvfp4(t));
        (&t == a ? global_a : global_b) = v.global;
        return v;
      },
      [](const Nvfp4Values& v, int64_t r) { return v.row_pairs(r); },
      [&](const uint8_t* const* rows, const uint8_t* const* scales, int64_t n,
          int64_t kk, int64_t len, void* packed) {
        for (size_t i = 0; i < order.size(); ++i) {
          if (order[i] != INT64_MIN) {
            globals[i] = order[i] >= 0 ? global_a : global_b;
          }
        }
        kc::PackRowsNVFP4(rows, scales, globals.data(), n, kk, len, packed);
      },
      a, b, row_len, order, k);
}

absl::StatusOr<PackedWeight> Pack(const WeightTensor* a, const WeightTensor* b,
                                  int64_t row_len,
                                  const std::vector<int64_t>& order, int64_t k,
                                  WeightDType dtype) {
  switch (dtype) {
    case WeightDType::kF32:
      return PackTyped<float>(a, b, row_len, order, k, kc::WeightFormat::kF32);
    case WeightDType::kBF16:
      return PackTyped<uint16_t>(a, b, row_len, order, k,
                                 kc::WeightFormat::kBF16);
    case WeightDType::kFP8:
      return PackFp8(a, b, row_len, order, k);
    case WeightDType::kMXFP4:
      return PackMxfp4(a, b, row_len, order, k);
    case WeightDType::kNVFP4:
      return PackNvfp4(a, b, row_len, order, k);
    case WeightDType::kAuto:
      break;
  }
  return absl::InternalError("weight dtype 'auto' reached the packer");
}

// Fetches and packs one SwiGLU expert (routed, or the shared one).
absl::StatusOr<ExpertWeights> LoadExpert(const ModelSource& src, int64_t layer,
                                         int64_t expert, bool shared,
                                         WeightDType dtype) {
  const MoeLayerConfig& c = src.info().LayerConfig(layer);
  const int64_t inter = shared ? c.shared_inter : c.inter;
  const WeightRole r1 = shared ? WeightRole::kSharedW1 : WeightRole::kW1;
  const WeightRole r3 = shared ? WeightRole::kSharedW3 : WeightRole::kW3;
  const WeightRole r2 = shared ? WeightRole::kSharedW2 : WeightRole::kW2;
  // A routed expert reads rows of the experts' width (the latent width
  // under LatentMoE); the shared expert reads x itself.
  const int64_t width = shared ? c.hidden : c.expert_width();
  MOE_ASSIGN_OR_RETURN(WeightTensor w3, src.Get(layer, r3, expert));
  MOE_ASSIGN_OR_RETURN(WeightTensor w2, src.Get(layer, r2, expert));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(w3, c, r3));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(w2, c, r2));
  const int64_t ip = kc::PaddedInter(inter);
  ExpertWeights e;
  e.inter = inter;
  if (c.gated) {
    MOE_ASSIGN_OR_RETURN(WeightTensor w1, src.Get(layer, r1, expert));
    MOE_RETURN_IF_ERROR(CheckWeightTensor(w1, c, r1));
    std::vector<int64_t> order(2 * ip);
    kc::FusedGateUpRowOrder(inter, order.data());
    MOE_ASSIGN_OR_RETURN(e.w13, Pack(&w1, &w3, width, order, width, dtype));
  } else {
    // Non-gated: the up rows alone, padded to whole half panels.
    std::vector<int64_t> order(ip, INT64_MIN);
    for (int64_t i = 0; i < inter; ++i) order[i] = i;
    MOE_ASSIGN_OR_RETURN(e.w13, Pack(&w3, nullptr, width, order, width, dtype));
  }
  MOE_ASSIGN_OR_RETURN(
      e.w2, Pack(&w2, nullptr, inter, IdentityOrder(width), ip, dtype));
  if (!shared && c.expert_bias) {
    MOE_ASSIGN_OR_RETURN(e.b1,
                         LoadWeightVector(src, layer, WeightRole::kB1, expert));
    MOE_ASSIGN_OR_RETURN(e.b3,
                         LoadWeightVector(src, layer, WeightRole::kB3, expert));
    MOE_ASSIGN_OR_RETURN(e.b2,
                         LoadWeightVector(src, layer, WeightRole::kB2, expert));
  }
  return e;
}

// The router's tensors beyond the gate and its biases: Gemma 4's router
// scales and the experts' frame (engine/expert_frame.h).
absl::Status LoadRouterExtras(const ModelSource& src, int64_t layer,
                              LayerWeights& w) {
  const MoeLayerConfig& c = w.config;
  if (c.router_prenorm) {
    MOE_ASSIGN_OR_RETURN(w.gate_scale,
                         LoadWeightVector(src, layer, WeightRole::kGateScale));
  }
  if (c.per_expert_scale) {
    MOE_ASSIGN_OR_RETURN(
        w.per_expert_scale,
        LoadWeightVector(src, layer, WeightRole::kPerExpertScale));
  }
  if (c.latent > 0) {
    MOE_ASSIGN_OR_RETURN(WeightTensor w1,
                         src.Get(layer, WeightRole::kLatentW1, -1));
    MOE_RETURN_IF_ERROR(CheckWeightTensor(w1, c, WeightRole::kLatentW1));
    // Kept as stored, like the gate: bf16 stays bf16 (exact, half the
    // memory), anything else is fp32; --weight-dtype is the experts'.
    const WeightDType dtype =
        w1.dtype == DType::kBF16 ? WeightDType::kBF16 : WeightDType::kF32;
    MOE_ASSIGN_OR_RETURN(
        w.latent_w1,
        Pack(&w1, nullptr, c.hidden, IdentityOrder(c.latent), c.hidden, dtype));
    MOE_ASSIGN_OR_RETURN(WeightTensor w2,
                         src.Get(layer, WeightRole::kLatentW2, -1));
    MOE_RETURN_IF_ERROR(CheckWeightTensor(w2, c, WeightRole::kLatentW2));
    MOE_ASSIGN_OR_RETURN(
        w.latent_w2,
        Pack(&w2, nullptr, c.latent, IdentityOrder(c.hidden), c.latent, dtype));
  }
  if (c.latent_bias) {
    MOE_ASSIGN_OR_RETURN(w.latent_b1,
                         LoadWeightVector(src, layer, WeightRole::kLatentB1));
    MOE_ASSIGN_OR_RETURN(w.latent_b2,
                         LoadWeightVector(src, layer, WeightRole::kLatentB2));
  }
  if (c.latent_norm) {
    MOE_ASSIGN_OR_RETURN(w.latent_norm,
                         LoadWeightVector(src, layer, WeightRole::kLatentNorm));
  }
  if (c.output_bias) {
    // Added on the router once per token, after the combine (JetMoE).
    MOE_ASSIGN_OR_RETURN(w.output_bias,
                         LoadWeightVector(src, layer, WeightRole::kOutputBias));
  }
  if (c.branch_norms) {
    MOE_ASSIGN_OR_RETURN(
        w.experts_in_norm,
        LoadWeightVector(src, layer, WeightRole::kExpertsInNorm));
    MOE_ASSIGN_OR_RETURN(
        w.experts_out_norm,
        LoadWeightVector(src, layer, WeightRole::kExpertsOutNorm));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<float>> LoadWeightVector(const ModelSource& src,
                                                    int64_t layer,
                                                    WeightRole role,
                                                    int64_t expert) {
  MOE_ASSIGN_OR_RETURN(WeightTensor t, src.Get(layer, role, expert));
  MOE_RETURN_IF_ERROR(
      CheckWeightTensor(t, src.info().LayerConfig(layer), role));
  MOE_ASSIGN_OR_RETURN(WeightValues<float> v, WeightsAsF32(t));
  return std::vector<float>(v.data, v.data + t.numel());
}

absl::StatusOr<std::vector<int32_t>> LoadTid2Eid(const ModelSource& src,
                                                 int64_t layer) {
  const MoeLayerConfig& c = src.info().LayerConfig(layer);
  MOE_ASSIGN_OR_RETURN(WeightTensor t,
                       src.Get(layer, WeightRole::kTid2Eid, -1));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(t, c, WeightRole::kTid2Eid));
  const int64_t n = t.numel(), k = c.top_k;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t v;
    if (t.dtype == DType::kI64) {
      std::memcpy(&v, t.data + i * 8, 8);
    } else {
      int32_t v32;
      std::memcpy(&v32, t.data + i * 4, 4);
      v = v32;
    }
    if (v < 0 || v >= c.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": row ", i / k, " holds expert ", v,
                       ", outside [0, ", c.num_experts, ")"));
    }
    for (int64_t j = i / k * k; j < i; ++j) {
      if (ids[j] == v) {
        return absl::InvalidArgumentError(absl::StrCat(
            t.name, ": row ", i / k, " names expert ", v, " twice"));
      }
    }
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

namespace {
int32_t ActIdOf(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return kernels::kActSilu;
    case Activation::kGptOss:
      return kernels::kActGptOss;
    case Activation::kSiluClamp:
      return kernels::kActSiluClamp;
    case Activation::kRelu2:
      return kernels::kActRelu2;
    case Activation::kGeluTanh:
      return kernels::kActGeluTanh;
    case Activation::kSitu:
      return kernels::kActSitu;
    case Activation::kGeluErf:
      return kernels::kActGeluErf;
    case Activation::kSwigluStep:
      return kernels::kActSwigluStep;
  }
  return kernels::kActSilu;
}
}  // namespace

kernels::GatedActParams GatedActOf(const MoeLayerConfig& c) {
  kernels::GatedActParams p;
  p.act = ActIdOf(c.act);
  p.alpha = c.act_alpha;
  p.limit = c.act_limit;
  p.beta = c.act_beta;
  p.linear_beta = c.act_linear_beta;
  return p;
}

kernels::GatedActParams SharedGatedActOf(const MoeLayerConfig& c) {
  kernels::GatedActParams p = GatedActOf(c);
  p.act = ActIdOf(c.shared_activation());
  p.limit = c.shared_limit();
  return p;
}

absl::string_view WeightDTypeName(WeightDType d) {
  switch (d) {
    case WeightDType::kF32:
      return "f32";
    case WeightDType::kBF16:
      return "bf16";
    case WeightDType::kFP8:
      return "fp8";
    case WeightDType::kMXFP4:
      return "mxfp4";
    case WeightDType::kNVFP4:
      return "nvfp4";
    case WeightDType::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<WeightDType> ParseWeightDType(absl::string_view text) {
  if (text == "f32" || text == "fp32" || text == "float32") {
    return WeightDType::kF32;
  }
  if (text == "bf16" || text == "bfloat16") return WeightDType::kBF16;
  if (text == "fp8" || text == "f8" || text == "f8_e4m3") {
    return WeightDType::kFP8;
  }
  if (text == "mxfp4" || text == "mx_fp4" || text == "fp4") {
    return WeightDType::kMXFP4;
  }
  if (text == "nvfp4" || text == "nv_fp4") return WeightDType::kNVFP4;
  if (text == "auto") return WeightDType::kAuto;
  return absl::InvalidArgumentError(absl::StrCat(
      "weight dtype '", text, "' is not auto, f32, bf16, fp8, mxfp4 or nvfp4"));
}

absl::StatusOr<WeightDType> ResolveWeightDType(WeightDType requested,
                                               const ModelSource& source) {
  if (requested != WeightDType::kAuto) return requested;
  const ModelInfo& info = source.info();
  if (info.moe_layers.empty() || info.layer.num_experts <= 0) {
    return WeightDType::kF32;
  }
  // W3: every expert has an up projection, gated or not.
  MOE_ASSIGN_OR_RETURN(WeightTensor t,
                       source.Get(info.moe_layers.front(), WeightRole::kW3, 0));
  if (t.is_mxfp4()) return WeightDType::kMXFP4;
  if (t.is_nvfp4()) return WeightDType::kNVFP4;
  switch (t.dtype) {
    case DType::kF8E4M3:
      return WeightDType::kFP8;
    case DType::kBF16:
      return WeightDType::kBF16;
    default:
      return WeightDType::kF32;
  }
}

absl::StatusOr<WeightDType> SharedExpertDType(WeightDType routed,
                                              const ModelSource& source) {
  if (routed != WeightDType::kMXFP4 && routed != WeightDType::kNVFP4) {
    return routed;
  }
  const ModelInfo& info = source.info();
  if (info.moe_layers.empty() || !info.layer.has_shared()) return routed;
  MOE_ASSIGN_OR_RETURN(WeightTensor t, source.Get(info.moe_layers.front(),
                                                  WeightRole::kSharedW3, -1));
  if (t.is_mxfp4()) return WeightDType::kMXFP4;
  if (t.is_nvfp4()) return WeightDType::kNVFP4;
  switch (t.dtype) {
    case DType::kF8E4M3:
      return WeightDType::kFP8;
    case DType::kBF16:
      return WeightDType::kBF16;
    default:
      return WeightDType::kF32;
  }
}

int64_t PackedExpertBytes(const MoeLayerConfig& config, WeightDType dtype) {
  const kc::WeightFormat f =
      dtype == WeightDType::kBF16    ? kc::WeightFormat::kBF16
      : dtype == WeightDType::kFP8   ? kc::WeightFormat::kFP8
      : dtype == WeightDType::kMXFP4 ? kc::WeightFormat::kMXFP4
      : dtype == WeightDType::kNVFP4 ? kc::WeightFormat::kNVFP4
                                     : kc::WeightFormat::kF32;
  const int64_t ip = kc::PaddedInter(config.inter);
  const int64_t W = config.expert_width();
  return kc::PackedBytes(f, (config.gated ? 2 : 1) * ip, W) +
         kc::PackedBytes(f, W, ip);
}

absl::StatusOr<PackedWeight> PackWeight(const WeightTensor& t,
                                        WeightDType dtype) {
  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": a packed weight must be 2-D"));
  }
  return Pack(&t, nullptr, t.shape[1], IdentityOrder(t.shape[0]), t.shape[1],
              dtype);
}

absl::StatusOr<std::pair<int64_t, int64_t>> ResolveExpertRange(
    const LoadOptions& options, int64_t num_experts) {
  const int64_t begin = options.expert_begin;
  const int64_t end = options.expert_end < 0 ? num_experts : options.expert_end;
  if (begin < 0 || begin > end || end > num_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert range [", begin, ", ", end, ") is not inside [0, ",
                     num_experts, "]"));
  }
  return std::pair{begin, end};
}

absl::StatusOr<std::vector<int32_t>> ResolveExpertList(
    const LoadOptions& options, int64_t layer, int64_t num_experts) {
  auto it = options.layer_experts.find(layer);
  if (it == options.layer_experts.end()) {
    MOE_ASSIGN_OR_RETURN(auto range, ResolveExpertRange(options, num_experts));
    std::vector<int32_t> ids;
    for (int64_t e = range.first; e < range.second; ++e) {
      ids.push_back(static_cast<int32_t>(e));
    }
    return ids;
  }
  for (int32_t e : it->second) {
    if (e < 0 || e >= num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer, ": expert slot holds expert ", e,
                       ", outside [0, ", num_experts, ")"));
    }
  }
  return it->second;
}

absl::StatusOr<std::unique_ptr<LayerWeights>> LoadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options) {
  if (!source.info().HasLayer(layer)) {
    return absl::NotFoundError(absl::StrCat(
        "layer ", layer, " is not an MoE layer of ", source.info().source));
  }
  // This layer's own routing: tid2eid for a hash layer, the correction bias
  // for a top-k one.
  const MoeLayerConfig& c = source.info().LayerConfig(layer);
  auto w = std::make_unique<LayerWeights>();
  w->layer = layer;
  w->config = c;
  MOE_ASSIGN_OR_RETURN(w->dtype, ResolveWeightDType(options.dtype, source));
  MOE_ASSIGN_OR_RETURN(std::tie(w->expert_begin, w->expert_end),
                       ResolveExpertRange(options, c.num_experts));
  MOE_ASSIGN_OR_RETURN(w->expert_ids,
                       ResolveExpertList(options, layer, c.num_experts));

  if (options.load_gate) {
    MOE_ASSIGN_OR_RETURN(WeightTensor g,
                         source.Get(layer, WeightRole::kGate, -1));
    MOE_RETURN_IF_ERROR(CheckWeightTensor(g, c, WeightRole::kGate));
    // The router is always fp32, whatever the experts' dtype.
    MOE_ASSIGN_OR_RETURN(
        w->gate, Pack(&g, nullptr, c.hidden, IdentityOrder(c.router_rows()),
                      c.hidden, WeightDType::kF32));
    w->has_gate = true;
    if (c.use_bias) {
      MOE_ASSIGN_OR_RETURN(
          w->expert_bias,
          LoadWeightVector(source, layer, WeightRole::kExpertBias));
    }
    if (c.router_bias) {
      MOE_ASSIGN_OR_RETURN(
          w->router_bias,
          LoadWeightVector(source, layer, WeightRole::kRouterBias));
    }
    if (c.hash_routed()) {
      MOE_ASSIGN_OR_RETURN(w->tid2eid, LoadTid2Eid(source, layer));
    }
    MOE_RETURN_IF_ERROR(LoadRouterExtras(source, layer, *w));
  }
  if (options.load_shared && c.has_shared()) {
    MOE_ASSIGN_OR_RETURN(WeightDType shared_dtype,
                         SharedExpertDType(w->dtype, source));
    MOE_ASSIGN_OR_RETURN(w->shared,
                         LoadExpert(source, layer, -1, true, shared_dtype));
    w->has_shared = true;
    if (c.shared_gate) {
      MOE_ASSIGN_OR_RETURN(
          w->shared_gate,
          LoadWeightVector(source, layer, WeightRole::kSharedGate));
    }
    if (c.branch_norms) {
      MOE_ASSIGN_OR_RETURN(
          w->shared_in_norm,
          LoadWeightVector(source, layer, WeightRole::kSharedInNorm));
      MOE_ASSIGN_OR_RETURN(
          w->shared_out_norm,
          LoadWeightVector(source, layer, WeightRole::kSharedOutNorm));
    }
  }

  const int64_t count = static_cast<int64_t>(w->expert_ids.size());
  w->experts.resize(count);
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(std::max(1, options.num_threads))
  for (int64_t i = 0; i < count; ++i) {
    if (failed.load()) continue;
    auto e = LoadExpert(source, layer, w->expert_ids[i], false, w->dtype);
    if (e.ok()) {
      w->experts[i] = std::move(*e);
    } else {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed.exchange(true)) first_error = e.status();
    }
  }
  if (failed.load()) return first_error;
  return w;
}

}  // namespace moe
