#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_queue.h"
#include "engine/cuda/cuda_router.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/fp8_image.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/step_setup.h"
#include "engine/device_backend.h"
#include "engine/device_load.h"
#include "engine/layer_shard.h"
#include "kernels/cuda/kernels.h"
#include "spdlog/spdlog.h"

namespace moe {
namespace {

namespace kcu = kernels::cuda;

// What the first step allocates (CudaBackend::AllocateStepBuffers).
struct StepBuffers {
  std::unique_ptr<CudaExperts> experts;  // routed: step rows
  DeviceBuffer send, recv, grouped, grouped_out, out, back;
};

class CudaBackend : public DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  // The members free their device memory (and queue_ its stream) on this
  // backend's device.
  ~CudaBackend() override { cudaSetDevice(device_); }

  absl::Status Init() {
    MOE_ASSIGN_OR_RETURN(queue_, CudaQueue::Create(device_));
    stream_ = queue_->cuda_stream();
    MOE_ASSIGN_OR_RETURN(lt_, LtMatmul::Create());
    return absl::OkStatus();
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }

  // The UUID as nvidia-smi prints it: GPU-8-4-4-4-12 hex digits.
  std::string device_identity() const override {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device_) != cudaSuccess) {
      (void)cudaGetLastError();
      return name();
    }
    std::string id = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) id += '-';
      absl::StrAppend(&id, absl::Hex(static_cast<uint8_t>(p.uuid.bytes[i]),
                                     absl::kZeroPad2));
    }
    return id;
  }

  absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const override {
    auto b = std::make_unique<CudaBackend>(device_);
    MOE_RETURN_IF_ERROR(b->Init());
    b->layers_ = layers_;
    b->config_ = config_;
    b->max_tokens_ = max_tokens_;
    b->fp8_ = fp8_;
    b->ShareHostParts(*this);
    MOE_RETURN_IF_ERROR(b->AllocateWorkspaces(router_ != nullptr));
    return std::unique_ptr<ExpertBackend>(std::move(b));
  }

  absl::Status Load(const ModelSource& source, const LoadOptions& options,
                    int64_t max_tokens) override {
    // The router part routes with one config per backend (config_), so a
    // model whose layers route differently is refused where it would route;
    // a worker (no gate) only runs experts, which are per layer already, and
    // so do the router's shared experts (each uploaded with its layer's
    // activation).
    for (const auto& [l, c] : source.info().layer_overrides) {
      if (!options.load_gate ||
          WithActivationOf(c, source.info().layer) == source.info().layer) {
        continue;
      }
      return absl::UnimplementedError(absl::StrCat(
          name(), " routes every MoE layer with one config; layer ", l,
          " routes by its own (hash and top-k layers in one model): route "
          "this model on a CPU router (CUDA workers can run its experts)"));
    }
    // Buffers, the step's bounds and the grouped GEMMs' plans are sized once
    // per model from config_, so layers of their own top_k or widths
    // (Hunyuan's per-layer moe_topk) run on CPU backends only.
    if (const auto l = FirstLayerOfOwnShape(source.info()); l.has_value()) {
      const MoeLayerConfig& c = source.info().LayerConfig(*l);
      const MoeLayerConfig& m = source.info().layer;
      return absl::UnimplementedError(
          absl::StrCat(name(),
                       " sizes its buffers for one top_k and expert width per "
                       "model; layer ",
                       *l, " has its own (top_k ", c.top_k, ", inter ", c.inter,
                       ", shared_inter ", c.shared_inter, "; the model's ",
                       m.top_k, ", ", m.inter, ", ", m.shared_inter,
                       "): serve this model with --device cpu"));
    }
    // A worker (no gate, no shared expert) runs the routed experts only,
    // which the kernels compute for every family; the router part refuses
    // what it cannot do yet, by name.
    const bool router_part = options.load_gate || options.load_shared;
    for (int64_t layer : source.info().moe_layers) {
      MOE_RETURN_IF_ERROR(CheckDeviceLayerMath(source.info().LayerConfig(layer),
                                               name(), router_part));
    }
    MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                         ResolveWeightDType(options.dtype, source));
    if (dtype != WeightDType::kBF16 && dtype != WeightDType::kFP8 &&
        dtype != WeightDType::kMXFP4 && dtype != WeightDType::kNVFP4) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), " keeps expert weights in bf16 or fp8; weight dtype ",
          WeightDTypeName(dtype),
          " is not supported on a GPU (use --weight-dtype bf16 or fp8)"));
    }
    if (dtype == WeightDType::kMXFP4 || dtype == WeightDType::kNVFP4) {
      spdlog::info("{}: {} experts dequantised to bf16 at load", name(),
                   std::string(WeightDTypeName(dtype)));
    }
    MOE_CUDA_OK(cudaSetDevice(device_));
    LoadOptions o = options;
    o.dtype = dtype;
    Fp8GpuPath path = Fp8GpuPath::kDequantBf16;
    if (dtype == WeightDType::kFP8) {
      cudaDeviceProp prop;
      MOE_CUDA_OK(cudaGetDeviceProperties(&prop, device_));
      MOE_ASSIGN_OR_RETURN(
          auto range, ResolveExpertRange(o, source.info().layer.num_experts));
      // The routed experts' rows are expert_width() wide (H but for
      // LatentMoE).
      const Fp8PathChoice c = ChooseFp8GpuPath(
          prop.major, prop.minor, source.info().layer.expert_width(),
          range.second - range.first);
      path = c.path;
      spdlog::info("{}: FP8 experts {} ({})", name(),
                   path == Fp8GpuPath::kBlockScaled
                       ? "kept as E4M3"
                       : "dequantised to bf16 on the device at load",
                   c.reason);
    }
    // Everything loads into a fresh backend of this device, taken whole once
    // all of it loaded: a failure at any point leaves this backend's layers,
    // config and workspaces serving (engine/device_load.h).
    bool uploaded = false;
    absl::StatusOr<std::unique_ptr<CudaBackend>> next =
        LoadFresh(source, o, max_tokens, path, &uploaded);
    if (!next.ok() && uploaded && path == Fp8GpuPath::kBlockScaled) {
      // The weights were there but the workspaces or plans were not:
      // cuBLASLt found no block-scaled algorithm for these shapes (plans are
      // built at load). The bf16 form serves them instead; the E4M3 copy
      // went with the failed backend, so the two are never held at once.
      spdlog::warn(
          "{}: block-scaled FP8 experts could not be set up ({}); FP8 "
          "experts dequantised to bf16 on the device instead",
          name(), std::string(next.status().message()));
      next =
          LoadFresh(source, o, max_tokens, Fp8GpuPath::kDequantBf16, &uploaded);
    }
    if (!next.ok()) return next.status();
    Adopt(**next);
    return absl::OkStatus();
  }

  // A backend of this device loaded with `source` in the form `path` says
  // (*uploaded once its weights are up), or the first failure.
  absl::StatusOr<std::unique_ptr<CudaBackend>> LoadFresh(
      const ModelSource& source, const LoadOptions& options, int64_t max_tokens,
      Fp8GpuPath path, bool* uploaded) const {
    *uploaded = false;
    auto b = std::make_unique<CudaBackend>(device_);
    MOE_RETURN_IF_ERROR(b->Init());
    MOE_RETURN_IF_ERROR(b->LoadAs(source, options, max_tokens, path, uploaded));
    return b;
  }

  // Takes the state of `from`, freshly loaded, and gives it this one's,
  // which goes with it.
  void Adopt(CudaBackend& from) {
    using std::swap;
    AdoptHostLogic(from);
    swap(queue_, from.queue_);
    swap(stream_, from.stream_);
    swap(lt_, from.lt_);
    swap(layers_, from.layers_);
    swap(router_, from.router_);
    swap(shared_experts_, from.shared_experts_);
    swap(xb_, from.xb_);
    swap(raw_shared_, from.raw_shared_);
    swap(gate_logit_, from.gate_logit_);
    swap(step_, from.step_);
    swap(fp8_, from.fp8_);
    expert_ptrs_.clear();
  }

  // Uploads the weights in the form `path` says (*uploaded once done), then
  // sizes the workspaces and builds the plans: on a fresh backend only
  // (LoadFresh), whose state nothing serves yet.
  absl::Status LoadAs(const ModelSource& source, const LoadOptions& options,
                      int64_t max_tokens, Fp8GpuPath path, bool* uploaded) {
    auto layers = std::make_shared<Layers>();
    bool gate = false;
    for (int64_t layer : source.info().moe_layers) {
      if (options.only_layer >= 0 && layer != options.only_layer) continue;
      MOE_ASSIGN_OR_RETURN((*layers)[layer],
                           UploadLayerWeights(source, layer, options, path));
      gate = gate || (*layers)[layer]->has_gate;
    }
    layers_ = std::move(layers);
    config_ = source.info().layer;
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kWeights));
    // What a router part computes on the host (DeviceBackend): the experts'
    // frame, Gemma 4's routing and its shared expert's norms.
    if (options.load_gate) MOE_RETURN_IF_ERROR(LoadHostParts(source, options));
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kHostParts));
    max_tokens_ = max_tokens;
    fp8_ =
        options.dtype == WeightDType::kFP8 && path == Fp8GpuPath::kBlockScaled;
    // Weights were copied on the legacy default stream, which the
    // non-blocking step stream does not wait for: finish them before any
    // step can read them, waiting for that stream only (another backend of
    // this device may be capturing a graph, engine/device_load.h).
    MOE_RETURN_IF_ERROR(AwaitLoadStream());
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kUploadsDone));
    *uploaded = true;
    return AllocateWorkspaces(gate);
  }

  absl::StatusOr<LayerShard> Shard(int64_t layer) const override {
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(layer));
    return ShardOf(*w);
  }

  // What the host logic (engine/device_backend.h) queues: the math only.
  DeviceStepQueue& device_queue() override { return *queue_; }

  absl::Status CheckShared(int64_t layer) override {
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(layer));
    if (!w->has_shared || shared_experts_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", layer, " has no shared expert loaded"));
    }
    return absl::OkStatus();
  }

  absl::Status QueueRoute(const DeviceRouteQuery& query,
                          DeviceRouteAnswer* answer) override {
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(query.layer));
    if (router_ == nullptr) {
      return absl::FailedPreconditionError(
          "this backend was loaded without the router's gate");
    }
    MOE_CUDA_OK(cudaSetDevice(device_));
    return router_->Queue(*lt_, *w, device_x(), query, *queue_, stream_,
                          answer);
  }

  absl::Status RouteLogits(int64_t layer, const float* logits,
                           const RouteRows& rows, Routing* routing) override {
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(layer));
    return router_->RouteLogits(*w, logits, rows, routing);
  }

  absl::Status QueueShared(int64_t layer, int64_t n, float* out) override {
    MOE_RETURN_IF_ERROR(CheckShared(layer));
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(layer));
    const int64_t H = config_.hidden;
    MOE_CUDA_OK(cudaSetDevice(device_));
    MOE_CUDA_OK(
        kcu::ConvertF32ToBf16(device_x(), n * H, xb_.as<uint16_t>(), stream_));
    const CudaExpert* e = &w->shared;
    const int64_t whole[2] = {0, n};
    MOE_RETURN_IF_ERROR(shared_experts_->Run(
        *lt_, {&e, 1}, whole, xb_.as<uint16_t>(), raw_shared_.data(),
        /*out_f32=*/true, stream_));
    MOE_CUDA_OK(cudaMemsetAsync(out, 0, n * H * 4, stream_));
    if (config_.shared_gate) {
      MOE_RETURN_IF_ERROR(lt_->Run(n, 1, H, device_x(), w->shared_gate.data(),
                                   gate_logit_.data(), CUDA_R_32F, CUDA_R_32F,
                                   stream_));
    }
    // out = 0 + gate * S(x): the gated shared expert, ready to add.
    MOE_CUDA_OK(
        kcu::AddRows(out, raw_shared_.as<float>(),
                     config_.shared_gate ? gate_logit_.as<float>() : nullptr, n,
                     H, stream_));
    return absl::OkStatus();
  }

  absl::Status QueueWiden(const uint16_t* src, int64_t count,
                          float* dst) override {
    MOE_CUDA_OK(cudaSetDevice(device_));
    MOE_CUDA_OK(kcu::ConvertBf16ToF32(src, count, dst, stream_));
    return absl::OkStatus();
  }

  absl::Status QueueAdd(float* y, const float* add, int64_t rows) override {
    MOE_CUDA_OK(cudaSetDevice(device_));
    MOE_CUDA_OK(kcu::AddRows(y, add, nullptr, rows, config_.hidden, stream_));
    return absl::OkStatus();
  }

  absl::Status PrepareStep(const EpPlan& /*bounds checked*/) override {
    // The step's buffers, allocated at load where the backend holds
    // experts; here only for one that did not (its first step allocates).
    MOE_RETURN_IF_ERROR(EnsureStepBuffers());
    StepBuffers& b = sb();
    SetBuffer(EpBuffer::kSend, b.send.data());
    SetBuffer(EpBuffer::kRecv, b.recv.data());
    SetBuffer(EpBuffer::kOut, b.out.data());
    SetBuffer(EpBuffer::kBack, b.back.data());
    return absl::OkStatus();
  }

  absl::Status QueueGather(const EpPlan& p, bool scaled) override {
    MOE_CUDA_OK(cudaSetDevice(device_));
    const DeviceStepIndices& d = device_indices();
    MOE_CUDA_OK(kcu::GatherRowsF32ToBf16(
        device_x(), config_.expert_width(), d.src_row,
        scaled ? d.scale : nullptr, p.sent, sb().send.as<uint16_t>(), stream_));
    return absl::OkStatus();
  }

  absl::Status RunExperts(int64_t layer, const EpPlan& p, const void* in,
                          void* out) override {
    MOE_ASSIGN_OR_RETURN(const CudaLayerWeights* w, Find(layer));
    const int64_t H = config_.expert_width();  // the step's rows
    expert_ptrs_.clear();
    for (const CudaExpert& e : w->experts) expert_ptrs_.push_back(&e);
    // Regroup (source, token) -> (expert, source, token) unless the rows
    // arrived grouped already (one source, one slot each), run, and put
    // the outputs in their rows of the way back unless they are there. FP8
    // experts gather as they quantise (one kernel, no bf16 copy).
    const uint16_t* grouped_in = static_cast<const uint16_t*>(in);
    const int32_t* gather = nullptr;
    if (!grouped_identity_) {
      if (fp8_) {
        gather = device_indices().grouped;
      } else {
        MOE_CUDA_OK(kcu::GatherRowsBf16(grouped_in, H, device_indices().grouped,
                                        p.received, sb().grouped.as<uint16_t>(),
                                        stream_));
        grouped_in = sb().grouped.as<uint16_t>();
      }
    }
    void* grouped_out = out_identity_ ? out : sb().grouped_out.data();
    MOE_RETURN_IF_ERROR(sb().experts->Run(*lt_, expert_ptrs_, p.expert_offsets,
                                          grouped_in, grouped_out,
                                          /*out_f32=*/false, stream_, gather));
    if (!out_identity_) {
      MOE_CUDA_OK(kcu::ScatterRowsBf16(sb().grouped_out.as<uint16_t>(), H,
                                       device_indices().out_row, p.received,
                                       static_cast<uint16_t*>(out), stream_));
    }
    return absl::OkStatus();
  }

  absl::Status QueueCombine(const EpPlan& p, const void* back,
                            float* y) override {
    MOE_CUDA_OK(cudaSetDevice(device_));
    const DeviceStepIndices& d = device_indices();
    MOE_CUDA_OK(kcu::CombineSlots(
        p.tokens, p.slots, config_.expert_width(),
        config_.score_before_experts ? nullptr : d.weights, d.slot_row,
        static_cast<const uint16_t*>(back), y, stream_));
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const CudaLayerWeights*> Find(int64_t layer) const {
    auto it = layers_->find(layer);
    if (it == layers_->end()) {
      return absl::NotFoundError(
          absl::StrCat("no weights for layer ", layer, " on ", name()));
    }
    return it->second.get();
  }

  // What routing and the shared expert need: sized for max_tokens rows.
  absl::Status AllocateWorkspaces(bool with_gate) {
    const MoeLayerConfig& c = config_;
    const int64_t H = c.hidden, T = max_tokens_;
    router_.reset();
    shared_experts_.reset();
    if (with_gate) {
      MOE_ASSIGN_OR_RETURN(router_, CudaRouter::Create(c, T));
      if (c.has_shared()) {
        MOE_ASSIGN_OR_RETURN(
            shared_experts_,
            CudaExperts::Create(T, H, c.shared_inter, 1, ExpertsOptions()));
      }
    }
    MOE_ASSIGN_OR_RETURN(
        raw_shared_, DeviceBuffer::Allocate(shared_experts_ ? T * H * 4 : 0));
    MOE_ASSIGN_OR_RETURN(xb_, DeviceBuffer::Allocate(T * H * 2));
    MOE_ASSIGN_OR_RETURN(gate_logit_, DeviceBuffer::Allocate(T * 4));
    MOE_RETURN_IF_ERROR(ReserveIo(with_gate));
    step_.Reset();
    MOE_RETURN_IF_ERROR(WarmPlans());
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kWorkspaces));
    // A backend that holds experts runs steps: their buffers now, so that
    // no step allocates (a router whose experts run on workers holds none).
    for (const auto& [layer, w] : *layers_) {
      if (!w->experts.empty()) {
        MOE_RETURN_IF_ERROR(EnsureStepBuffers());
        break;
      }
    }
    return AtLoadPoint(LoadPoint::kStepBuffers);
  }

  // The step's buffers kept only once allocated and calibrated whole: after
  // a failure (out of memory) the backend is as before, and the next
  // attempt tries again.
  absl::Status EnsureStepBuffers() {
    return step_.Ensure([&] { return AllocateStepBuffers(); },
                        [&](StepBuffers& b) { return Calibrate(b); });
    return WarmPlans();
  }

  // Every cuBLASLt plan the loaded layers' GEMMs can need, one per row
  // bucket (engine/cuda/lt_matmul.h), built now so that steps do not query
  // the heuristic: the router's gate, the shared expert and its gate over
  // up to max_tokens rows, the routed experts over up to the step's rows.
  absl::Status WarmPlans() {
    const int64_t H = config_.hidden, T = max_tokens_, R = bounds_.rows;
    std::vector<LtShape> shapes;
    auto add = [&](int64_t rows, int64_t n, int64_t k, cudaDataType_t in,
                   cudaDataType_t out) {
      for (const LtShape& s : shapes) {
        if (s.max_rows == rows && s.n == n && s.k == k && s.in == in &&
            s.out == out) {
          return;
        }
      }
      shapes.push_back(LtShape{rows, n, k, in, out});
    };
    // An expert pass's two GEMMs over rows of width W
    // (engine/cuda/expert_image.h: up alone for a non-gated expert). FP8
    // passes answer bf16 (widened to fp32 for the shared expert,
    // engine/cuda/cuda_experts.h); bf16 ones answer `down_out` from the
    // down GEMM.
    auto add_experts = [&](int64_t rows, const ExpertShape& e,
                           cudaDataType_t down_out) {
      const int64_t W = e.width;
      if (fp8_) {
        add(rows, GateUpCols(e.gated, Fp8InterPad(e.inter)), Fp8Pad(W),
            CUDA_R_8F_E4M3, CUDA_R_16BF);
        add(rows, W, Fp8DownK(e.inter), CUDA_R_8F_E4M3, CUDA_R_16BF);
      } else {
        add(rows, GateUpCols(e.gated, e.inter), W, CUDA_R_16BF, CUDA_R_16BF);
        add(rows, W, e.inter, CUDA_R_16BF, down_out);
      }
    };
    for (const auto& [layer, w] : *layers_) {
      const MoeLayerConfig& c = w->config;
      if (w->has_gate && router_ != nullptr) {
        add(T, c.num_experts, H, CUDA_R_32F, CUDA_R_32F);
      }
      if (w->has_shared && shared_experts_ != nullptr) {
        add_experts(T, SharedExpertShape(c), CUDA_R_32F);
        if (c.shared_gate) add(T, 1, H, CUDA_R_32F, CUDA_R_32F);
      }
      if (!w->experts.empty())
        add_experts(R, RoutedExpertShape(c), CUDA_R_16BF);
    }
    MOE_CUDA_OK(cudaSetDevice(device_));
    return lt_->Warm(shapes);
  }

  // The step's row buffers and expert pass, from the step bounds (kept once
  // this and Calibrate succeeded).
  absl::StatusOr<std::unique_ptr<StepBuffers>> AllocateStepBuffers() {
    const MoeLayerConfig& c = config_;
    // The step's rows are the experts' width (LatentMoE's latent width).
    const int64_t W = c.expert_width(), R = bounds_.rows;
    int64_t local = 1;
    for (const auto& [layer, w] : *layers_) {
      local = std::max<int64_t>(local, w->experts.size());
    }
    MOE_CUDA_OK(cudaSetDevice(device_));
    auto b = std::make_unique<StepBuffers>();
    MOE_ASSIGN_OR_RETURN(b->experts, CudaExperts::Create(R, W, c.inter, local,
                                                         ExpertsOptions()));
    for (DeviceBuffer* d : {&b->send, &b->recv, &b->grouped, &b->grouped_out,
                            &b->out, &b->back}) {
      MOE_ASSIGN_OR_RETURN(*d, DeviceBuffer::Allocate(R * W * 2));
    }
    return b;
  }

  // Both GEMM paths timed for every row bucket when the step buffers are
  // made (at load, or before a first step's exchange is queued): timing
  // waits for the stream, which must never wait on a peer outside the
  // communicator's deadline.
  absl::Status Calibrate(StepBuffers& b) {
    for (const auto& [layer, w] : *layers_) {  // all of the same shapes
      if (w->experts.empty()) continue;
      expert_ptrs_.clear();
      for (const CudaExpert& e : w->experts) expert_ptrs_.push_back(&e);
      return b.experts->Calibrate(*lt_, expert_ptrs_, b.grouped.as<uint16_t>(),
                                  b.grouped_out.data(), stream_);
    }
    return absl::OkStatus();
  }

  StepBuffers& sb() const { return *step_.get(); }

  CudaExpertsOptions ExpertsOptions() const {
    CudaExpertsOptions o;
    o.fp8 = fp8_;
    o.device = device_;
    return o;
  }

  int device_;
  std::unique_ptr<CudaQueue> queue_;
  cudaStream_t stream_ = nullptr;  // queue_'s
  std::unique_ptr<LtMatmul> lt_;
  using Layers = std::map<int64_t, std::unique_ptr<CudaLayerWeights>>;
  // Shared with forks; immutable once loaded.
  std::shared_ptr<const Layers> layers_ = std::make_shared<Layers>();
  std::unique_ptr<CudaRouter> router_;
  std::unique_ptr<CudaExperts> shared_experts_;  // shared: max_tokens rows
  DeviceBuffer xb_, raw_shared_, gate_logit_;
  StepSetup<StepBuffers> step_;
  bool fp8_ = false;  // experts are block-scaled FP8 (sm_90)
  std::vector<const CudaExpert*> expert_ptrs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertBackend>> CreateCudaBackend(int ordinal) {
  MOE_RETURN_IF_ERROR(CudaDeviceAvailable(ordinal));
  auto b = std::make_unique<CudaBackend>(ordinal);
  MOE_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<ExpertBackend>(std::move(b));
}

}  // namespace moe
