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

absl::StatusOr<PackedWeight> Pack(const WeightTensor* a, const WeightTensor* b,
                                  int64_t row_len,
                                  const std::vector<int64_t>& order, int64_t k,
                                  WeightDType dtype) {
  return dtype == WeightDType::kF32
             ? PackTyped<float>(a, b, row_len, order, k, kc::WeightFormat::kF32)
             : PackTyped<uint16_t>(a, b, row_len, order, k,
                                   kc::WeightFormat::kBF16);
}

// Fetches and packs one SwiGLU expert (routed, or the shared one).
absl::StatusOr<ExpertWeights> LoadExpert(const ModelSource& src, int64_t layer,
                                         int64_t expert, bool shared,
                                         WeightDType dtype) {
  const MoeLayerConfig& c = src.info().layer;
  const int64_t inter = shared ? c.shared_inter : c.inter;
  const WeightRole r1 = shared ? WeightRole::kSharedW1 : WeightRole::kW1;
  const WeightRole r3 = shared ? WeightRole::kSharedW3 : WeightRole::kW3;
  const WeightRole r2 = shared ? WeightRole::kSharedW2 : WeightRole::kW2;
  MOE_ASSIGN_OR_RETURN(WeightTensor w1, src.Get(layer, r1, expert));
  MOE_ASSIGN_OR_RETURN(WeightTensor w3, src.Get(layer, r3, expert));
  MOE_ASSIGN_OR_RETURN(WeightTensor w2, src.Get(layer, r2, expert));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(w1, c, r1));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(w3, c, r3));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(w2, c, r2));
  const int64_t ip = kc::PaddedInter(inter);
  std::vector<int64_t> order(2 * ip);
  kc::FusedGateUpRowOrder(inter, order.data());
  ExpertWeights e;
  e.inter = inter;
  MOE_ASSIGN_OR_RETURN(e.w13, Pack(&w1, &w3, c.hidden, order, c.hidden, dtype));
  MOE_ASSIGN_OR_RETURN(
      e.w2, Pack(&w2, nullptr, inter, IdentityOrder(c.hidden), ip, dtype));
  return e;
}

absl::StatusOr<std::vector<float>> LoadVector(const ModelSource& src,
                                              int64_t layer, WeightRole role) {
  MOE_ASSIGN_OR_RETURN(WeightTensor t, src.Get(layer, role, -1));
  MOE_RETURN_IF_ERROR(CheckWeightTensor(t, src.info().layer, role));
  MOE_ASSIGN_OR_RETURN(WeightValues<float> v, WeightsAsF32(t));
  return std::vector<float>(v.data, v.data + t.numel());
}

}  // namespace

absl::string_view WeightDTypeName(WeightDType d) {
  return d == WeightDType::kF32 ? "f32" : "bf16";
}

absl::StatusOr<WeightDType> ParseWeightDType(absl::string_view text) {
  if (text == "f32" || text == "fp32" || text == "float32") {
    return WeightDType::kF32;
  }
  if (text == "bf16" || text == "bfloat16") return WeightDType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("weight dtype '", text, "' is not f32 or bf16"));
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
  const MoeLayerConfig& c = source.info().layer;
  if (!source.info().HasLayer(layer)) {
    return absl::NotFoundError(absl::StrCat(
        "layer ", layer, " is not an MoE layer of ", source.info().source));
  }
  auto w = std::make_unique<LayerWeights>();
  w->layer = layer;
  w->config = c;
  w->dtype = options.dtype;
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
        w->gate, Pack(&g, nullptr, c.hidden, IdentityOrder(c.num_experts),
                      c.hidden, WeightDType::kF32));
    w->has_gate = true;
    if (c.use_bias) {
      MOE_ASSIGN_OR_RETURN(w->expert_bias,
                           LoadVector(source, layer, WeightRole::kExpertBias));
    }
  }
  if (options.load_shared && c.has_shared()) {
    MOE_ASSIGN_OR_RETURN(w->shared,
                         LoadExpert(source, layer, -1, true, options.dtype));
    w->has_shared = true;
    if (c.shared_gate) {
      MOE_ASSIGN_OR_RETURN(w->shared_gate,
                           LoadVector(source, layer, WeightRole::kSharedGate));
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
    auto e = LoadExpert(source, layer, w->expert_ids[i], false, options.dtype);
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
