#include "engine/cuda/cuda_weights.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "engine/device_backend.h"
#include "engine/weight_values.h"
#include "kernels/cuda/kernels.h"
#include "kernels/fp8_rule.h"

namespace moe {
namespace {

absl::StatusOr<DeviceBuffer> Upload(const void* data, size_t bytes) {
  MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  if (bytes > 0)
    MOE_CUDA_OK(cudaMemcpy(b.data(), data, bytes, cudaMemcpyHostToDevice));
  return b;
}

absl::StatusOr<WeightTensor> Fetch(const ModelSource& src, int64_t layer,
                                   WeightRole role, int64_t expert) {
  MOE_ASSIGN_OR_RETURN(WeightTensor t, src.Get(layer, role, expert));
  MOE_RETURN_IF_ERROR(
      CheckWeightTensor(t, src.info().LayerConfig(layer), role));
  return t;
}

// An fp32 vector of the checkpoint, uploaded as it is.
absl::Status UploadVector(const ModelSource& src, int64_t layer,
                          WeightRole role, int64_t expert, DeviceBuffer* out) {
  MOE_ASSIGN_OR_RETURN(std::vector<float> v,
                       LoadWeightVector(src, layer, role, expert));
  MOE_ASSIGN_OR_RETURN(*out, Upload(v.data(), v.size() * 4));
  return absl::OkStatus();
}

// FP8 experts: E4M3 codes and block scales as engine/cuda/fp8_image.h lays
// them out; kept as they are (block-scaled path), or dequantised on the
// device into the bf16 form of the other path, W1 and W3 rows fused.
// A non-gated expert has no W1 (w1 null).
absl::Status UploadFp8Expert(const WeightTensor* w1, const WeightTensor& w3,
                             const WeightTensor& w2, Fp8GpuPath path,
                             CudaExpert* e) {
  MOE_ASSIGN_OR_RETURN(Fp8ExpertImage img, PackFp8Expert(w1, w3, w2));
  DeviceBuffer w13, w13_scale, w2c, w2_scale;
  MOE_ASSIGN_OR_RETURN(w13, Upload(img.w13.data(), img.w13.size()));
  MOE_ASSIGN_OR_RETURN(w13_scale,
                       Upload(img.w13_scale.data(), img.w13_scale.size() * 4));
  MOE_ASSIGN_OR_RETURN(w2c, Upload(img.w2.data(), img.w2.size()));
  MOE_ASSIGN_OR_RETURN(w2_scale,
                       Upload(img.w2_scale.data(), img.w2_scale.size() * 4));
  if (path == Fp8GpuPath::kBlockScaled) {
    e->fp8 = true;
    e->hidden_k = img.hidden_k;
    e->inter_pad = img.inter_pad;
    e->down_k = img.down_k;
    e->w13 = std::move(w13);
    e->w13_scale = std::move(w13_scale);
    e->w2 = std::move(w2c);
    e->w2_scale = std::move(w2_scale);
    return absl::OkStatus();
  }
  const int64_t H = img.hidden, I = img.inter;
  MOE_ASSIGN_OR_RETURN(
      e->w13, DeviceBuffer::Allocate(GateUpCols(img.gated, I) * H * 2));
  MOE_ASSIGN_OR_RETURN(e->w2, DeviceBuffer::Allocate(H * I * 2));
  for (const Fp8DequantPart& part : Fp8DequantParts(img)) {
    const DeviceBuffer& codes = part.to_w2 ? w2c : w13;
    const DeviceBuffer& scale = part.to_w2 ? w2_scale : w13_scale;
    DeviceBuffer& dst = part.to_w2 ? e->w2 : e->w13;
    MOE_CUDA_OK(kernels::cuda::DequantizeFp8ToBf16(
        codes.as<uint8_t>() + part.code_offset, part.rows, part.cols,
        part.code_ld, scale.as<float>() + part.scale_offset, part.scale_ld,
        dst.as<uint16_t>() + part.dst_offset, part.dst_ld, nullptr));
  }
  // The E4M3 copies are freed on return: the kernels must be done with them.
  MOE_CUDA_OK(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}

absl::StatusOr<CudaExpert> UploadExpert(const ModelSource& src, int64_t layer,
                                        int64_t expert, bool shared,
                                        WeightDType dtype, Fp8GpuPath path) {
  const MoeLayerConfig& c = src.info().LayerConfig(layer);
  const ExpertShape shape =
      shared ? SharedExpertShape(c) : RoutedExpertShape(c);
  CudaExpert e;
  e.inter = shape.inter;
  e.gated = shape.gated;
  e.act = shared ? SharedGatedActOf(c) : GatedActOf(c);
  if (!shared && c.expert_bias) {  // the CPU has no shared-expert biases
    MOE_RETURN_IF_ERROR(
        UploadVector(src, layer, WeightRole::kB1, expert, &e.b1));
    MOE_RETURN_IF_ERROR(
        UploadVector(src, layer, WeightRole::kB3, expert, &e.b3));
    MOE_RETURN_IF_ERROR(
        UploadVector(src, layer, WeightRole::kB2, expert, &e.b2));
  }
  // A non-gated expert has no W1 to fetch.
  WeightTensor w1;
  if (shape.gated) {
    MOE_ASSIGN_OR_RETURN(
        w1, Fetch(src, layer, shared ? WeightRole::kSharedW1 : WeightRole::kW1,
                  expert));
  }
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w3,
      Fetch(src, layer, shared ? WeightRole::kSharedW3 : WeightRole::kW3,
            expert));
  MOE_ASSIGN_OR_RETURN(
      WeightTensor w2,
      Fetch(src, layer, shared ? WeightRole::kSharedW2 : WeightRole::kW2,
            expert));
  if (dtype == WeightDType::kFP8) {
    MOE_RETURN_IF_ERROR(
        UploadFp8Expert(shape.gated ? &w1 : nullptr, w3, w2, path, &e));
    return e;
  }
  // MXFP4 and NVFP4 routed experts: no FP4 tensor cores on sm_90, so their
  // values (a checkpoint's, or quantised here) go up as bf16 (exactly for
  // MXFP4; NVFP4's global scale can need one rounding); the shared expert
  // as bf16 (engine/weight_values.h).
  auto as_bf16 = shared                         ? WeightsAsBf16
                 : dtype == WeightDType::kMXFP4 ? WeightsAsMxfp4Bf16
                 : dtype == WeightDType::kNVFP4 ? WeightsAsNvfp4Bf16
                                                : WeightsAsBf16;
  WeightValues<uint16_t> v1;
  if (shape.gated) {
    MOE_ASSIGN_OR_RETURN(v1, as_bf16(w1));
  }
  MOE_ASSIGN_OR_RETURN(WeightValues<uint16_t> v3, as_bf16(w3));
  MOE_ASSIGN_OR_RETURN(WeightValues<uint16_t> v2, as_bf16(w2));
  MOE_ASSIGN_OR_RETURN(
      std::vector<uint16_t> w13,
      PackBf16GateUp(shape, shape.gated ? v1.data : nullptr, v3.data));
  MOE_ASSIGN_OR_RETURN(e.w13, Upload(w13.data(), w13.size() * 2));
  MOE_ASSIGN_OR_RETURN(e.w2, Upload(v2.data, shape.inter * shape.width * 2));
  return e;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLayerWeights>> UploadLayerWeights(
    const ModelSource& source, int64_t layer, const LoadOptions& options,
    Fp8GpuPath fp8_path) {
  const MoeLayerConfig& c = source.info().LayerConfig(layer);
  if (options.dtype != WeightDType::kBF16 &&
      options.dtype != WeightDType::kFP8 &&
      options.dtype != WeightDType::kMXFP4 &&
      options.dtype != WeightDType::kNVFP4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a GPU keeps expert weights in bf16, fp8, mxfp4 or nvfp4 (both as "
        "bf16); weight dtype ",
        WeightDTypeName(options.dtype), " is not supported on a GPU"));
  }
  if (!source.info().HasLayer(layer)) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " is not an MoE layer"));
  }
  auto w = std::make_unique<CudaLayerWeights>();
  w->layer = layer;
  w->config = c;
  MOE_ASSIGN_OR_RETURN(std::tie(w->expert_begin, w->expert_end),
                       ResolveExpertRange(options, c.num_experts));
  if (options.layer_experts.count(layer) > 0) {
    // Redundant experts (engine/placement.h) are CPU-only for now.
    return absl::UnimplementedError(
        "the CUDA backend loads contiguous expert ranges only, not the slot "
        "list of a redundant placement (--redundant-experts)");
  }
  if (options.load_gate) {
    MOE_ASSIGN_OR_RETURN(std::vector<float> gate,
                         LoadWeightVector(source, layer, WeightRole::kGate));
    MOE_ASSIGN_OR_RETURN(w->gate, Upload(gate.data(), gate.size() * 4));
    if (c.use_bias) {
      MOE_ASSIGN_OR_RETURN(
          w->expert_bias,
          LoadWeightVector(source, layer, WeightRole::kExpertBias));
      MOE_ASSIGN_OR_RETURN(
          w->expert_bias_dev,
          Upload(w->expert_bias.data(), w->expert_bias.size() * 4));
    }
    if (c.router_bias) {
      MOE_ASSIGN_OR_RETURN(
          w->router_bias,
          LoadWeightVector(source, layer, WeightRole::kRouterBias));
      MOE_ASSIGN_OR_RETURN(
          w->router_bias_dev,
          Upload(w->router_bias.data(), w->router_bias.size() * 4));
    }
    if (c.hash_routed()) {
      MOE_ASSIGN_OR_RETURN(w->tid2eid, LoadTid2Eid(source, layer));
      MOE_ASSIGN_OR_RETURN(w->tid2eid_dev,
                           Upload(w->tid2eid.data(), w->tid2eid.size() * 4));
    }
    w->has_gate = true;
  }
  if (options.load_shared && c.has_shared()) {
    MOE_ASSIGN_OR_RETURN(w->shared, UploadExpert(source, layer, -1, true,
                                                 options.dtype, fp8_path));
    if (c.shared_gate) {
      MOE_ASSIGN_OR_RETURN(
          std::vector<float> g,
          LoadWeightVector(source, layer, WeightRole::kSharedGate));
      MOE_ASSIGN_OR_RETURN(w->shared_gate, Upload(g.data(), g.size() * 4));
    }
    w->has_shared = true;
  }
  for (int64_t e = w->expert_begin; e < w->expert_end; ++e) {
    MOE_ASSIGN_OR_RETURN(CudaExpert x, UploadExpert(source, layer, e, false,
                                                    options.dtype, fp8_path));
    w->experts.push_back(std::move(x));
  }
  return w;
}

}  // namespace moe
