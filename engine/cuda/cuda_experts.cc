#include "engine/cuda/cuda_experts.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "kernels/cuda/kernels.h"
#include "kernels/fp8_rule.h"
#include "spdlog/spdlog.h"

namespace moe {
namespace {

constexpr int kPointerArrays = 6;  // w13, x, gate_up; w2, h, out
constexpr int kTimedReps = 3;

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// An expert's gate and up biases (if it has them) onto its m rows of bf16
// gate-up values (row stride ld, up columns from `up`), before the
// activation reads them.
absl::Status AddGateUpBias(const CudaExpert& e, uint16_t* gate_up, int64_t m,
                           int64_t ld, int64_t up, cudaStream_t stream) {
  if (!e.has_bias()) return absl::OkStatus();
  MOE_CUDA_OK(kernels::cuda::AddBiasRowsBf16(gate_up, m, e.inter, ld,
                                             e.b1.as<float>(), stream));
  MOE_CUDA_OK(kernels::cuda::AddBiasRowsBf16(gate_up + up, m, e.inter, ld,
                                             e.b3.as<float>(), stream));
  return absl::OkStatus();
}

// One pass runs experts of one dtype, size, activation and bias form, within
// the workspaces it was created with.
absl::Status CheckPassExperts(absl::Span<const CudaExpert* const> experts,
                              const int32_t* gather, bool fp8_workspaces,
                              int64_t max_experts) {
  if (experts.empty()) return absl::OkStatus();
  const bool fp8 = experts.front()->fp8;
  for (const CudaExpert* e : experts) {
    if (e->fp8 != fp8 || e->inter != experts.front()->inter ||
        e->gated != experts.front()->gated || e->act != experts.front()->act ||
        e->has_bias() != experts.front()->has_bias()) {
      return absl::InvalidArgumentError(
          "one expert pass needs experts of one dtype, size, gate form, "
          "activation and bias form");
    }
  }
  if (gather != nullptr && !fp8) {
    return absl::InvalidArgumentError(
        "a gathered expert pass needs FP8 experts");
  }
  if (fp8 && !fp8_workspaces) {
    return absl::FailedPreconditionError(
        "FP8 experts in a pass created without FP8 workspaces");
  }
  if (fp8 &&
      static_cast<int64_t>(experts.size()) >
          std::min<int64_t>(max_experts, kernels::cuda::kMaxFp8Segments)) {
    return absl::InvalidArgumentError(absl::StrCat(
        experts.size(), " FP8 experts in one pass exceed the workspaces (",
        std::min<int64_t>(max_experts, kernels::cuda::kMaxFp8Segments), ")"));
  }
  return absl::OkStatus();
}

// `offsets` holds num_experts + 1 entries.
absl::Status CheckPassOffsets(size_t num_experts,
                              absl::Span<const int64_t> offsets) {
  // Every row SiLU-mul reads, [offsets.front(), offsets.back()), is written
  // by one expert's GEMM first: offsets must start at 0 or more and never
  // go down.
  for (size_t g = 0; g < num_experts; ++g) {
    if (offsets[g] < 0 || offsets[g + 1] < offsets[g]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert offsets must be non-negative and non-decreasing; offsets[", g,
          "..", g + 1, "] = ", offsets[g], ", ", offsets[g + 1]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaExperts>> CudaExperts::Create(
    int64_t max_rows, int64_t hidden, int64_t max_inter, int64_t max_experts,
    const CudaExpertsOptions& options) {
  auto x = std::unique_ptr<CudaExperts>(new CudaExperts());
  x->max_rows_ = max_rows;
  x->hidden_ = hidden;
  x->max_inter_ = max_inter;
  x->max_experts_ = std::max<int64_t>(max_experts, 1);
  x->max_graph_rows_ = options.max_graph_rows;
  x->mode_ = options.gemm_path;
  x->paths_ = options.paths;
  if (x->paths_ == nullptr) {
    int device = options.device;
    if (device < 0) MOE_CUDA_OK(cudaGetDevice(&device));
    x->paths_ = SharedGemmPathTable::For(
        {device, max_rows, hidden, max_inter, x->max_experts_, options.fp8});
  }
  // FP8 experts write gate-up rows of 2 Ip (W3 on a 128-row boundary), and
  // each of their matmuls runs up to kFp8RowQuantum - 1 rows past its own
  // (kernels/fp8_rule.h): the buffers it reads or writes hold that many
  // spare rows past max_rows, zeroed once so that no matmul reads memory
  // never written.
  const int64_t spare = options.fp8 ? kernels::kFp8RowQuantum - 1 : 0;
  const int64_t gate_up_cols =
      2 * (options.fp8 ? Fp8InterPad(max_inter) : max_inter);
  MOE_ASSIGN_OR_RETURN(x->gate_up_, DeviceBuffer::Allocate((max_rows + spare) *
                                                           gate_up_cols * 2));
  MOE_ASSIGN_OR_RETURN(x->h_, DeviceBuffer::Allocate(max_rows * max_inter * 2));
  if (options.fp8) MOE_RETURN_IF_ERROR(x->AllocateFp8(spare));
  const int max_graphs = std::max(options.max_graphs, 0);
  x->graphs_ = std::make_unique<GraphCache<cudaGraphExec_t>>(
      max_graphs, [](cudaGraphExec_t g) { cudaGraphExecDestroy(g); });
  for (cudaEvent_t& e : x->timing_) MOE_CUDA_OK(cudaEventCreate(&e));
  MOE_CUDA_OK(cudaEventCreateWithFlags(&x->staged_, cudaEventDisableTiming));
  // The grouped call pays off only over several experts; int sizes.
  if (x->max_experts_ > 1 && max_rows <= std::numeric_limits<int>::max()) {
    MOE_RETURN_IF_ERROR(x->SetUpGrouped(max_graphs));
  }
  return x;
}

absl::Status CudaExperts::AllocateFp8(int64_t spare) {
  namespace k = kernels;
  const int64_t Hk = Fp8Pad(hidden_), Ik = Fp8DownK(max_inter_);
  const int64_t E = max_experts_, rows = max_rows_ + spare;
  fp8_ = true;
  MOE_ASSIGN_OR_RETURN(xq_, DeviceBuffer::Allocate(rows * Hk));
  MOE_ASSIGN_OR_RETURN(
      xq_scale_,
      DeviceBuffer::Allocate(k::Fp8ActScaleFloats(max_rows_, E, hidden_) * 4));
  MOE_ASSIGN_OR_RETURN(hq_, DeviceBuffer::Allocate(rows * Ik));
  MOE_ASSIGN_OR_RETURN(
      hq_scale_,
      DeviceBuffer::Allocate(k::Fp8ActScaleFloats(max_rows_, E, Ik) * 4));
  MOE_ASSIGN_OR_RETURN(down_, DeviceBuffer::Allocate(rows * hidden_ * 2));
  for (const DeviceBuffer* b : {&xq_, &xq_scale_, &hq_, &hq_scale_}) {
    MOE_CUDA_OK(cudaMemset(b->data(), 0, b->size()));
  }
  // cudaMemset may return before it is done, and the passes run on
  // non-blocking streams that do not wait for the legacy stream: that stream
  // alone is awaited (engine/cuda/device_buffer.h).
  MOE_RETURN_IF_ERROR(AwaitLoadStream());
  return absl::OkStatus();
}

absl::Status CudaExperts::SetUpGrouped(int max_graphs) {
  auto g = GroupedGemm::Create(static_cast<int>(max_experts_));
  if (!g.ok()) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::info("expert GEMMs: per-expert cuBLASLt only ({})",
                   std::string(g.status().message()));
    }
    return absl::OkStatus();
  }
  grouped_ = std::move(*g);
  const size_t per_region = kPointerArrays * max_experts_;
  MOE_ASSIGN_OR_RETURN(ptr_host_,
                       PinnedBuffer::Allocate(per_region * sizeof(void*)));
  MOE_ASSIGN_OR_RETURN(
      ptr_dev_,
      DeviceBuffer::Allocate((1 + max_graphs) * per_region * sizeof(void*)));
  group_rows_.reserve(max_experts_);
  // Padded passes may take up to 4 x max_graph_rows rows (the buckets'
  // rounding up): within the workspaces.
  if (max_graph_rows_ > 0) {
    const int64_t P = std::min(max_rows_, 4 * max_graph_rows_);
    MOE_ASSIGN_OR_RETURN(pad_in_, DeviceBuffer::Allocate(P * hidden_ * 2));
    MOE_ASSIGN_OR_RETURN(pad_out_, DeviceBuffer::Allocate(P * hidden_ * 2));
    MOE_ASSIGN_OR_RETURN(pad_map_, DeviceBuffer::Allocate(P * 4));
    MOE_ASSIGN_OR_RETURN(pad_map_host_, PinnedBuffer::Allocate(P * 4));
    max_padded_rows_ = P;
  }
  return absl::OkStatus();
}

CudaExperts::~CudaExperts() {
  graphs_.reset();  // destroys the graphs before what they point into
  for (cudaEvent_t e : timing_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (staged_ != nullptr) cudaEventDestroy(staged_);
}

bool CudaExperts::GroupedFits(const Pass& p) const {
  const int64_t I = p.experts.front()->inter;
  // bf16 output only; 16-byte aligned pointers and row strides (the
  // call's rule for bf16); room in the pointer arrays. Experts with biases
  // (gpt-oss) take the loop, which adds each expert's own after its GEMMs.
  return grouped_ != nullptr && !p.experts.front()->fp8 &&
         !p.experts.front()->has_bias() && !p.out_f32 && p.experts.size() > 1 &&
         static_cast<int64_t>(p.experts.size()) <= max_experts_ &&
         hidden_ % 8 == 0 && I % 8 == 0 && Aligned16(p.in) && Aligned16(p.out);
}

absl::Status CudaExperts::Run(LtMatmul& lt,
                              absl::Span<const CudaExpert* const> experts,
                              absl::Span<const int64_t> offsets,
                              const uint16_t* in, void* out, bool out_f32,
                              cudaStream_t stream, const int32_t* gather) {
  if (offsets.size() != experts.size() + 1) {
    return absl::InvalidArgumentError(
        "expert offsets need one more entry than experts");
  }
  MOE_RETURN_IF_ERROR(CheckPassExperts(experts, gather, fp8_, max_experts_));
  MOE_RETURN_IF_ERROR(CheckPassOffsets(experts.size(), offsets));
  const int64_t rows = offsets.back() - offsets.front();
  if (rows == 0) return absl::OkStatus();
  const int64_t I = experts.front()->inter;
  if (offsets.back() > max_rows_ || I > max_inter_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        offsets.back(), " rows of intermediate size ", I,
        " exceed the workspace (", max_rows_, " rows, size ", max_inter_, ")"));
  }
  const Pass p{&lt, experts, offsets, in, out, out_f32, stream, gather};
  GemmPath path = GroupedFits(p) ? PathFor(rows) : GemmPath::kLoop;
  if (path == GemmPath::kUnmeasured) {
    MOE_RETURN_IF_ERROR(Measure(p));
    spdlog::info("expert GEMM paths measured: {}", PathSummary());
    return absl::OkStatus();
  }
  // Graphs: not on the legacy stream (it cannot be captured). Grouped
  // passes of graph sizes always run padded, captured or not, so that a
  // replay and an eager pass are the same kernels, hence the same bits.
  if (rows <= max_graph_rows_ && stream != nullptr &&
      path == GemmPath::kGrouped && gather == nullptr &&
      PlanPaddedPass(offsets, max_padded_rows_, &pad_)) {
    return RunPadded(p);
  }
  if (rows <= max_graph_rows_ && stream != nullptr && graphs_->capacity() > 0) {
    BuildKey(path, p);
    const auto look = graphs_->Find(key_);
    if (look.action == GraphCache<cudaGraphExec_t>::Action::kReplay) {
      MOE_CUDA_OK(cudaGraphLaunch(look.exec, stream));
      return absl::OkStatus();
    }
    if (look.action == GraphCache<cudaGraphExec_t>::Action::kCapture) {
      return Capture(path, p, look.slot);
    }
  }
  return RunEager(path, p);
}

void CudaExperts::BuildKey(GemmPath path, const Pass& p) {
  auto word = [](const void* ptr) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
  };
  key_.clear();
  key_.push_back(static_cast<uint64_t>(path));
  key_.push_back(p.out_f32 ? 1 : 0);
  key_.push_back(word(p.gather));
  key_.push_back(static_cast<uint64_t>(p.experts.front()->inter));
  key_.push_back(word(p.in));
  key_.push_back(word(p.out));
  key_.push_back(word(p.lt));  // its workspace and plans
  key_.push_back(static_cast<uint64_t>(p.offsets.front()));
  for (size_t g = 0; g < p.experts.size(); ++g) {
    key_.push_back(word(p.experts[g]->w13.data()));
    key_.push_back(word(p.experts[g]->w2.data()));
    key_.push_back(static_cast<uint64_t>(p.offsets[g + 1] - p.offsets[g]));
  }
}

absl::Status CudaExperts::RunFp8(const Pass& p) {
  namespace k = kernels;
  const CudaExpert& e0 = *p.experts.front();
  const int64_t H = hidden_, I = e0.inter, Ik = e0.down_k;
  const int64_t Hk = e0.hidden_k;
  // Gate-up rows of GU columns, u from column `up`: 2 Ip and Ip for a
  // gated expert, Ip and 0 for a non-gated one.
  const int64_t GU = e0.gate_up_cols(), up = e0.up_col();
  const int64_t first = p.offsets.front(),
                rows = p.offsets.back() - p.offsets.front();
  // Rows, gate-up, h and the scale tables count from the pass's first row;
  // only `in` (ungathered) and `out` are indexed by absolute row.
  k::cuda::Fp8Segments seg;
  seg.count = static_cast<int32_t>(p.experts.size());
  for (int32_t g = 0; g < seg.count; ++g) {
    seg.end[g] = static_cast<int32_t>(p.offsets[g + 1] - first);
  }
  auto* xq = xq_.as<uint8_t>();
  auto* xs = xq_scale_.as<float>();
  auto* gate_up = gate_up_.as<uint16_t>();
  auto* hq = hq_.as<uint8_t>();
  auto* hs = hq_scale_.as<float>();
  MOE_CUDA_OK(
      k::cuda::QuantizeRowsFp8(p.gather != nullptr ? p.in : p.in + first * H, H,
                               p.gather != nullptr ? p.gather + first : nullptr,
                               rows, seg, Hk, xq, xs, p.stream));
  // Each matmul runs Fp8MatmulRows(m) rows (kernels/fp8_rule.h). The rows
  // past m read the next experts' rows, or the spare rows past the pass,
  // and write gate-up rows that the next experts' matmuls overwrite after
  // (one stream, in order), or spare rows; their outputs are never used.
  for (int32_t g = 0; g < seg.count; ++g) {
    const int64_t off = p.offsets[g] - first,
                  m = p.offsets[g + 1] - first - off;
    const CudaExpert& e = *p.experts[g];
    MOE_RETURN_IF_ERROR(p.lt->RunFp8(k::Fp8MatmulRows(m), GU, Hk, xq + off * Hk,
                                     xs + k::Fp8SegmentScaleBase(off, g, H),
                                     e.w13.data(), e.w13_scale.as<float>(),
                                     gate_up + off * GU, p.stream));
    MOE_RETURN_IF_ERROR(
        AddGateUpBias(e, gate_up + off * GU, m, GU, up, p.stream));
  }
  MOE_CUDA_OK(k::cuda::SiluMulQuantFp8(gate_up, GU, up, I, rows, seg, Ik, hq,
                                       hs, p.stream, e0.act));
  auto* out_bf16 = p.out_f32 ? down_.as<uint16_t>()
                             : static_cast<uint16_t*>(p.out) + first * H;
  for (int32_t g = 0; g < seg.count; ++g) {
    const int64_t off = p.offsets[g] - first,
                  m = p.offsets[g + 1] - first - off;
    const int64_t m4 = k::Fp8MatmulRows(m);
    const CudaExpert& e = *p.experts[g];
    // Rows past the pass in the caller's buffer are not ours to write (they
    // may be another pass's, or past its end): an expert whose padded rows
    // reach them writes to the scratch rows and its m rows are copied.
    const bool spills = !p.out_f32 && off + m4 > rows;
    uint16_t* dst = spills ? down_.as<uint16_t>() : out_bf16 + off * H;
    MOE_RETURN_IF_ERROR(p.lt->RunFp8(
        m4, H, Ik, hq + off * Ik, hs + k::Fp8SegmentScaleBase(off, g, I),
        e.w2.data(), e.w2_scale.as<float>(), dst, p.stream));
    if (e.has_bias()) {
      MOE_CUDA_OK(
          k::cuda::AddBiasRowsBf16(dst, m, H, H, e.b2.as<float>(), p.stream));
    }
    if (spills && m > 0) {
      MOE_CUDA_OK(cudaMemcpyAsync(out_bf16 + off * H, dst, m * H * 2,
                                  cudaMemcpyDeviceToDevice, p.stream));
    }
  }
  if (p.out_f32) {
    MOE_CUDA_OK(k::cuda::ConvertBf16ToF32(
        out_bf16, rows * H, static_cast<float*>(p.out) + first * H, p.stream));
  }
  return absl::OkStatus();
}

absl::Status CudaExperts::RunLoop(const Pass& p) {
  if (p.experts.front()->fp8) return RunFp8(p);
  const int64_t H = hidden_, I = p.experts.front()->inter;
  const int64_t GU = p.experts.front()->gate_up_cols(),
                up = p.experts.front()->up_col();
  auto* gate_up = gate_up_.as<uint16_t>();
  auto* h = h_.as<uint16_t>();
  const size_t out_size = p.out_f32 ? 4 : 2;
  for (size_t g = 0; g < p.experts.size(); ++g) {
    const int64_t off = p.offsets[g], m = p.offsets[g + 1] - off;
    MOE_RETURN_IF_ERROR(p.lt->Run(m, GU, H, p.in + off * H,
                                  p.experts[g]->w13.data(), gate_up + off * GU,
                                  CUDA_R_16BF, CUDA_R_16BF, p.stream));
    MOE_RETURN_IF_ERROR(
        AddGateUpBias(*p.experts[g], gate_up + off * GU, m, GU, up, p.stream));
  }
  const int64_t first = p.offsets.front(),
                rows = p.offsets.back() - p.offsets.front();
  MOE_CUDA_OK(kernels::cuda::ActRowsBf16(gate_up + first * GU, GU, up, rows, I,
                                         h + first * I, p.stream,
                                         p.experts.front()->act));
  for (size_t g = 0; g < p.experts.size(); ++g) {
    const CudaExpert& e = *p.experts[g];
    const int64_t off = p.offsets[g], m = p.offsets[g + 1] - off;
    char* out = static_cast<char*>(p.out) + off * H * out_size;
    MOE_RETURN_IF_ERROR(
        p.lt->Run(m, H, I, h + off * I, e.w2.data(), out, CUDA_R_16BF,
                  p.out_f32 ? CUDA_R_32F : CUDA_R_16BF, p.stream));
    if (!e.has_bias()) continue;
    MOE_CUDA_OK(p.out_f32 ? kernels::cuda::AddBiasRowsF32(
                                reinterpret_cast<float*>(out), m, H, H,
                                e.b2.as<float>(), p.stream)
                          : kernels::cuda::AddBiasRowsBf16(
                                reinterpret_cast<uint16_t*>(out), m, H, H,
                                e.b2.as<float>(), p.stream));
  }
  return absl::OkStatus();
}

absl::Status CudaExperts::StagePointers(const Pass& p, int region) {
  const int64_t H = hidden_, I = p.experts.front()->inter, E = max_experts_;
  const int64_t GU = p.experts.front()->gate_up_cols();
  // The previous staging copy must have read the pinned arrays before they
  // are overwritten (it has, unless passes are queued back to back).
  MOE_CUDA_OK(cudaEventSynchronize(staged_));
  const void** host = ptr_host_.as<const void*>();
  auto* gate_up = gate_up_.as<uint16_t>();
  auto* h = h_.as<uint16_t>();
  auto* out = static_cast<uint16_t*>(p.out);
  group_rows_.clear();
  int i = 0;
  for (size_t g = 0; g < p.experts.size(); ++g) {
    const int64_t off = p.offsets[g], m = p.offsets[g + 1] - off;
    if (m == 0) continue;  // no group for an expert without rows
    group_rows_.push_back(static_cast<int>(m));
    host[0 * E + i] = p.experts[g]->w13.data();
    host[1 * E + i] = p.in + off * H;
    host[2 * E + i] = gate_up + off * GU;
    host[3 * E + i] = p.experts[g]->w2.data();
    host[4 * E + i] = h + off * I;
    host[5 * E + i] = out + off * H;
    ++i;
  }
  const size_t bytes = kPointerArrays * E * sizeof(void*);
  MOE_CUDA_OK(cudaMemcpyAsync(ptr_dev_.as<char>() + region * bytes, host, bytes,
                              cudaMemcpyHostToDevice, p.stream));
  MOE_CUDA_OK(cudaEventRecord(staged_, p.stream));
  return absl::OkStatus();
}

absl::Status CudaExperts::RunGrouped(const Pass& p, int region) {
  const int64_t H = hidden_, I = p.experts.front()->inter, E = max_experts_;
  const int64_t GU = p.experts.front()->gate_up_cols(),
                up = p.experts.front()->up_col();
  void** base = ptr_dev_.as<void*>() + region * kPointerArrays * E;
  auto in_ptrs = [&](int a) {
    return reinterpret_cast<const void* const*>(base + a * E);
  };
  // cuBLAS may read the thread's last error after its launch: an unrelated
  // one left by an earlier runtime call (kernels/cuda/launch.cuh) must not
  // fail this call and turn the grouped path off for good.
  (void)cudaGetLastError();
  MOE_RETURN_IF_ERROR(grouped_->Run(group_rows_, static_cast<int>(GU),
                                    static_cast<int>(H), in_ptrs(0), in_ptrs(1),
                                    base + 2 * E, p.stream));
  const int64_t first = p.offsets.front(),
                rows = p.offsets.back() - p.offsets.front();
  MOE_CUDA_OK(kernels::cuda::ActRowsBf16(
      gate_up_.as<uint16_t>() + first * GU, GU, up, rows, I,
      h_.as<uint16_t>() + first * I, p.stream, p.experts.front()->act));
  (void)cudaGetLastError();
  MOE_RETURN_IF_ERROR(grouped_->Run(group_rows_, static_cast<int>(H),
                                    static_cast<int>(I), in_ptrs(3), in_ptrs(4),
                                    base + 5 * E, p.stream));
  return absl::OkStatus();
}

GemmPath CudaExperts::PathFor(int64_t rows) const {
  if (mode_ == GemmPathTable::Mode::kLoop || !paths_->grouped_enabled()) {
    return GemmPath::kLoop;
  }
  if (mode_ == GemmPathTable::Mode::kGrouped) return GemmPath::kGrouped;
  return paths_->For(rows);
}

void CudaExperts::GroupedFailed(const absl::Status& s) {
  paths_->DisableGrouped();
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    spdlog::warn(
        "expert GEMMs: cublasGemmGroupedBatchedEx failed ({}); the per-expert "
        "cuBLASLt loop serves every shape from now on",
        std::string(s.message()));
  }
}

absl::Status CudaExperts::RunEager(GemmPath path, const Pass& p) {
  if (path == GemmPath::kGrouped) {
    absl::Status s = StagePointers(p, 0);
    if (s.ok()) s = RunGrouped(p, 0);
    if (s.ok()) return s;
    GroupedFailed(s);
    (void)cudaGetLastError();
  }
  return RunLoop(p);
}

absl::Status CudaExperts::Measure(const Pass& p) {
  const int64_t rows = p.offsets.back() - p.offsets.front();
  // The grouped form Run would use: padded at graph sizes.
  const bool padded = rows <= max_graph_rows_ && p.stream != nullptr &&
                      p.gather == nullptr &&
                      PlanPaddedPass(p.offsets, max_padded_rows_, &pad_);
  auto run_grouped = [&] {
    absl::Status s = padded ? StagePadded(p) : StagePointers(p, 0);
    if (s.ok()) s = padded ? RunPaddedBody(p) : RunGrouped(p, 0);
    return s;
  };
  // Once each untimed (modules load lazily, plans get built), then both
  // timed, interleaved, on this pass's own rows: the outputs are the same
  // rows either way.
  MOE_RETURN_IF_ERROR(RunLoop(p));
  absl::Status gs = run_grouped();
  double loop_us = 0, grouped_us = 0;
  for (int rep = 0; rep < kTimedReps && gs.ok(); ++rep) {
    MOE_CUDA_OK(cudaEventRecord(timing_[0], p.stream));
    MOE_RETURN_IF_ERROR(RunLoop(p));
    MOE_CUDA_OK(cudaEventRecord(timing_[1], p.stream));
    gs = run_grouped();
    MOE_CUDA_OK(cudaEventRecord(timing_[2], p.stream));
    MOE_CUDA_OK(cudaEventSynchronize(timing_[2]));
    float a = 0, b = 0;
    MOE_CUDA_OK(cudaEventElapsedTime(&a, timing_[0], timing_[1]));
    MOE_CUDA_OK(cudaEventElapsedTime(&b, timing_[1], timing_[2]));
    loop_us += a * 1000.0 / kTimedReps;
    grouped_us += b * 1000.0 / kTimedReps;
  }
  if (!gs.ok()) {
    GroupedFailed(gs);
    (void)cudaGetLastError();
    paths_->Record(rows, loop_us, -1);
    return RunLoop(p);  // the failed call may have written part of `out`
  }
  // The table's choice: another instance sharing it may have measured the
  // bucket first, and its choice stands.
  const GemmPath chosen = paths_->Record(rows, loop_us, grouped_us);
  spdlog::debug(
      "expert GEMMs, {} rows (bucket {}) over {} experts: per-expert loop "
      "{:.1f} us, grouped {:.1f} us: {}",
      rows, RowBucket(rows, max_rows_), p.experts.size(), loop_us, grouped_us,
      GemmPathName(chosen));
  // The last pass ran grouped: the output must be the chosen path's bits.
  if (chosen == GemmPath::kLoop) return RunLoop(p);
  return absl::OkStatus();
}

absl::Status CudaExperts::Calibrate(LtMatmul& lt,
                                    absl::Span<const CudaExpert* const> experts,
                                    uint16_t* in, void* out,
                                    cudaStream_t stream) {
  if (experts.empty() || mode_ != GemmPathTable::Mode::kAuto) {
    return absl::OkStatus();
  }
  const int64_t E = static_cast<int64_t>(experts.size());
  std::vector<int64_t> offsets(E + 1);
  const Pass probe{&lt, experts, offsets, in, out, false, stream};
  if (!GroupedFits(probe) || experts.front()->inter > max_inter_) {
    return absl::OkStatus();
  }
  // Defined inputs (bf16 0x3c3c, about 0.0115): the timing does not depend
  // on them, but nothing may read uninitialised memory.
  MOE_CUDA_OK(cudaMemsetAsync(in, 0x3c, max_rows_ * hidden_ * 2, stream));
  const GemmPathTable before = paths_->Snapshot();
  for (const GemmPathChoice& c : before.choices()) {
    if (paths_->For(c.bucket) != GemmPath::kUnmeasured ||
        !paths_->grouped_enabled()) {
      continue;
    }
    for (int64_t g = 0; g <= E; ++g) offsets[g] = c.bucket * g / E;
    MOE_RETURN_IF_ERROR(
        Measure(Pass{&lt, experts, offsets, in, out, false, stream}));
  }
  MOE_CUDA_OK(cudaStreamSynchronize(stream));
  spdlog::info("expert GEMM paths over {} experts: {}", E, PathSummary());
  return absl::OkStatus();
}

std::string CudaExperts::PathSummary() const {
  std::string out;
  const GemmPathTable paths = paths_->Snapshot();
  for (const GemmPathChoice& c : paths.choices()) {
    if (c.chosen == GemmPath::kUnmeasured) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", c.bucket, " rows ",
                    std::string(GemmPathName(c.chosen)), " (loop ",
                    absl::SixDigits(c.loop_us), " us, grouped ",
                    absl::SixDigits(c.grouped_us), " us)");
  }
  if (!paths.grouped_enabled()) absl::StrAppend(&out, "; grouped off");
  return out;
}

absl::Status CudaExperts::Capture(GemmPath path, const Pass& p, int slot) {
  const int region = 1 + slot;
  // The graph's own pointer arrays, copied before the capture: replays read
  // them, and nothing rewrites them while the key lives.
  if (path == GemmPath::kGrouped) {
    if (absl::Status s = StagePointers(p, region); !s.ok()) {
      graphs_->MarkFailed(key_);
      return s;
    }
  }
  return CaptureWith(
      p, path == GemmPath::kGrouped ? "grouped" : "loop",
      [&] {
        return path == GemmPath::kGrouped ? RunGrouped(p, region) : RunLoop(p);
      },
      [&] { return RunEager(path, p); });
}

absl::Status CudaExperts::CaptureWith(const Pass& p, const char* what,
                                      absl::FunctionRef<absl::Status()> body,
                                      absl::FunctionRef<absl::Status()> eager) {
  // Thread-local mode: other threads (other backends' streams) may keep
  // allocating while this one captures.
  cudaError_t e =
      cudaStreamBeginCapture(p.stream, cudaStreamCaptureModeThreadLocal);
  absl::Status s;
  cudaGraph_t graph = nullptr;
  if (e == cudaSuccess) {
    s = body();
    e = cudaStreamEndCapture(p.stream, &graph);  // ends it even after errors
  }
  cudaGraphExec_t exec = nullptr;
  if (s.ok() && e == cudaSuccess && graph != nullptr) {
    e = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!s.ok() || e != cudaSuccess || exec == nullptr) {
    (void)cudaGetLastError();
    graphs_->MarkFailed(key_);
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::warn(
          "expert GEMMs: a {} pass could not be captured as a CUDA graph "
          "({}{}); such shapes run eagerly",
          what, std::string(s.message()),
          e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
    return eager();  // nothing captured ran
  }
  graphs_->Insert(key_, exec);
  MOE_CUDA_OK(cudaGraphLaunch(exec, p.stream));
  return absl::OkStatus();
}

absl::Status CudaExperts::StagePadded(const Pass& p) {
  const int64_t H = hidden_, I = p.experts.front()->inter, E = max_experts_;
  const int64_t G = pad_.groups, C = pad_.group_rows, P = pad_.rows();
  const int64_t GU = p.experts.front()->gate_up_cols();
  // The previous staging copies must have read the pinned arrays.
  MOE_CUDA_OK(cudaEventSynchronize(staged_));
  const void** host = ptr_host_.as<const void*>();
  auto* in = pad_in_.as<uint16_t>();
  auto* gate_up = gate_up_.as<uint16_t>();
  auto* h = h_.as<uint16_t>();
  auto* out = pad_out_.as<uint16_t>();
  for (int64_t i = 0; i < G; ++i) {
    const CudaExpert& e = *p.experts[pad_.expert[i]];
    host[0 * E + i] = e.w13.data();
    host[1 * E + i] = in + i * C * H;
    host[2 * E + i] = gate_up + i * C * GU;
    host[3 * E + i] = e.w2.data();
    host[4 * E + i] = h + i * C * I;
    host[5 * E + i] = out + i * C * H;
  }
  std::memcpy(pad_map_host_.data(), pad_.row.data(), P * 4);
  group_rows_.assign(G, static_cast<int>(C));
  // Region 0, as eager passes: the stream orders these copies between the
  // passes that read them, graph replays included.
  const size_t bytes = kPointerArrays * E * sizeof(void*);
  MOE_CUDA_OK(cudaMemcpyAsync(ptr_dev_.data(), host, bytes,
                              cudaMemcpyHostToDevice, p.stream));
  MOE_CUDA_OK(cudaMemcpyAsync(pad_map_.data(), pad_map_host_.data(), P * 4,
                              cudaMemcpyHostToDevice, p.stream));
  MOE_CUDA_OK(cudaEventRecord(staged_, p.stream));
  return absl::OkStatus();
}

absl::Status CudaExperts::RunPaddedBody(const Pass& p) {
  namespace k = kernels::cuda;
  const int64_t H = hidden_, I = p.experts.front()->inter, E = max_experts_;
  const int64_t P = pad_.rows();
  const int64_t GU = p.experts.front()->gate_up_cols(),
                up = p.experts.front()->up_col();
  void** base = ptr_dev_.as<void*>();
  auto in_ptrs = [&](int a) {
    return reinterpret_cast<const void* const*>(base + a * E);
  };
  MOE_CUDA_OK(k::GatherRowsBf16(p.in, H, pad_map_.as<int32_t>(), P,
                                pad_in_.as<uint16_t>(), p.stream));
  (void)cudaGetLastError();  // see RunGrouped
  MOE_RETURN_IF_ERROR(grouped_->Run(group_rows_, static_cast<int>(GU),
                                    static_cast<int>(H), in_ptrs(0), in_ptrs(1),
                                    base + 2 * E, p.stream));
  MOE_CUDA_OK(k::ActRowsBf16(gate_up_.as<uint16_t>(), GU, up, P, I,
                             h_.as<uint16_t>(), p.stream,
                             p.experts.front()->act));
  (void)cudaGetLastError();
  MOE_RETURN_IF_ERROR(grouped_->Run(group_rows_, static_cast<int>(H),
                                    static_cast<int>(I), in_ptrs(3), in_ptrs(4),
                                    base + 5 * E, p.stream));
  MOE_CUDA_OK(k::ScatterRowsBf16(pad_out_.as<uint16_t>(), H,
                                 pad_map_.as<int32_t>(), P,
                                 static_cast<uint16_t*>(p.out), p.stream));
  return absl::OkStatus();
}

absl::Status CudaExperts::RunPaddedEager(const Pass& p) {
  absl::Status s = RunPaddedBody(p);
  if (s.ok()) return s;
  GroupedFailed(s);
  (void)cudaGetLastError();
  return RunLoop(p);
}

absl::Status CudaExperts::RunPadded(const Pass& p) {
  MOE_RETURN_IF_ERROR(StagePadded(p));
  auto word = [](const void* ptr) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
  };
  // The activation and the gate-up layout are baked into the capture too
  // (kernel and GEMM arguments).
  const kernels::GatedActParams& act = p.experts.front()->act;
  const uint64_t buffers[] = {word(p.in),
                              word(p.out),
                              static_cast<uint64_t>(act.act),
                              absl::bit_cast<uint32_t>(act.alpha),
                              absl::bit_cast<uint32_t>(act.limit),
                              absl::bit_cast<uint32_t>(act.beta),
                              absl::bit_cast<uint32_t>(act.linear_beta),
                              p.experts.front()->gated ? 1u : 0u};
  key_ = PaddedGraphKey(pad_, p.experts.front()->inter, buffers);
  const auto look = graphs_->Find(key_);
  if (look.action == GraphCache<cudaGraphExec_t>::Action::kReplay) {
    MOE_CUDA_OK(cudaGraphLaunch(look.exec, p.stream));
    return absl::OkStatus();
  }
  if (look.action == GraphCache<cudaGraphExec_t>::Action::kCapture) {
    return CaptureWith(
        p, "padded grouped", [&] { return RunPaddedBody(p); },
        [&] { return RunPaddedEager(p); });
  }
  return RunPaddedEager(p);
}

}  // namespace moe
