// Grouped SwiGLU over experts on a GPU: each expert's contiguous block of
// bf16 rows through gate and up together (one [2I, H] matrix, bf16 out), a
// SiLU-mul (the layer's activation, kernels/act_rule.h) that reads those
// bf16 values, then down. A non-gated expert runs up alone ([I, H]; relu2
// of u, engine/cuda/expert_image.h); H here is the rows' width, the
// latent width for LatentMoE's routed experts. Two ways to run the
// GEMMs, both kept:
//  - the loop: one cuBLASLt matmul per expert and projection, with a plan
//    per row bucket (engine/cuda/lt_matmul.h);
//  - grouped: one cublasGemmGroupedBatchedEx per projection over every
//    expert with rows (engine/cuda/grouped_gemm.h).
// Each row bucket is timed both ways, by Calibrate or else at its first use,
// and keeps the faster, in a table shared by every instance of the same
// sizes on the device (SharedGemmPathTable, engine/cuda/gemm_path.h; logged,
// and readable through gemm_paths()). A
// grouped call that fails is logged once and the loop serves from then on.
// Passes of up to max_graph_rows rows (decode sizes) are captured once per
// key as a CUDA graph and replayed (engine/cuda/graph_cache.h). Grouped
// passes run padded (engine/cuda/padded_pass.h): the experts with rows as a
// row bucket of groups of a row bucket of rows each, the row map and the
// groups' weight pointers uploaded before each pass, so the key is the two
// buckets and the buffers, not the per-expert counts, and one graph serves
// every pass of them (and the grouped side of a graph-sized bucket is timed
// in that padded form). Loop passes (and grouped ones too large to pad) bake
// their sizes and weights in: their key holds every pointer and size (rows,
// weights, LtMatmul and its workspace, per-expert counts). A replay reads
// device memory when it runs, so it does exactly what an eager pass with
// that key would do.
// Block-scaled FP8 experts (CudaExpert::fp8, engine/cuda/fp8_image.h) run
// the loop only (cuBLAS has no grouped block-scaled FP8 call): the rows are
// quantised to E4M3 with per-row per-128 scales as they are gathered, one
// cuBLASLt block-scaled matmul per expert writes bf16 gate-up values, the
// SiLU-mul quantises h the same way, and the down matmuls write bf16 (fp32
// output through a bf16 scratch, widened).
// Workspaces, pointer arrays and graph slots are sized once; weights are
// immutable for the life of an instance (a reload makes a new one; or call
// InvalidateGraphs). Not thread-safe: one per stream.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/gemm_path.h"
#include "engine/cuda/graph_cache.h"
#include "engine/cuda/grouped_gemm.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/padded_pass.h"

namespace moe {

struct CudaExpertsOptions {
  GemmPathTable::Mode gemm_path = GemmPathTable::Mode::kAuto;
  // Passes of at most this many rows are captured as graphs once their
  // shape repeats; 0: never.
  int64_t max_graph_rows = 256;
  int max_graphs = 64;  // shapes remembered (graphs held) at once
  // Workspaces for block-scaled FP8 experts too (E4M3 rows, their scales).
  bool fp8 = false;
  // The row-bucket path table. Null: the process's table for this device
  // and these sizes (SharedGemmPathTable::For), shared with every other
  // instance of them, so that all measure once and choose alike.
  std::shared_ptr<SharedGemmPathTable> paths;
  int device = -1;  // for that table's key; < 0: the current device
};

class CudaExperts {
 public:
  // Room for up to max_rows rows through up to max_experts experts of
  // intermediate size up to max_inter.
  static absl::StatusOr<std::unique_ptr<CudaExperts>> Create(
      int64_t max_rows, int64_t hidden, int64_t max_inter,
      int64_t max_experts = 1, const CudaExpertsOptions& options = {});
  ~CudaExperts();

  // Rows [offsets[g], offsets[g+1]) of `in` (bf16 [rows, H]) go through
  // experts[g] into the same rows of `out`, bf16 or (out_f32) fp32 (fp32
  // output always takes the loop: the grouped call writes bf16 only).
  // With `gather` (device, FP8 experts only), row r of the pass is
  // in[gather[r]]: the gather is fused into the quantisation.
  absl::Status Run(LtMatmul& lt, absl::Span<const CudaExpert* const> experts,
                   absl::Span<const int64_t> offsets, const uint16_t* in,
                   void* out, bool out_f32, cudaStream_t stream,
                   const int32_t* gather = nullptr);

  // Times both GEMM paths for every row bucket not measured yet, on that
  // many rows spread evenly over `experts` (`in`, [max_rows, H], is filled
  // with a constant first; `out` is overwritten), so that no step has to. It
  // waits for the stream: call it only when nothing that may wait on another
  // process (a collective) is queued there. Does nothing unless the grouped
  // path can serve these experts in auto mode.
  absl::Status Calibrate(LtMatmul& lt,
                         absl::Span<const CudaExpert* const> experts,
                         uint16_t* in, void* out, cudaStream_t stream);

  // Benchmarks and tests: force a path (kAuto measures again only buckets
  // not measured yet), or change the graph threshold (0: no graphs).
  void set_gemm_mode(GemmPathTable::Mode m) { mode_ = m; }
  void set_max_graph_rows(int64_t rows) { max_graph_rows_ = rows; }
  bool grouped_available() const {
    return grouped_ != nullptr && paths_->grouped_enabled();
  }
  // A copy of the (shared) table as it is now.
  GemmPathTable gemm_paths() const { return paths_->Snapshot(); }
  const GraphCache<cudaGraphExec_t>::Stats& graph_stats() const {
    return graphs_->stats();
  }
  size_t graphs_held() const { return graphs_->graphs(); }
  // Drops every captured graph (the weights or buffers they read changed).
  void InvalidateGraphs() { graphs_->Clear(); }

 private:
  CudaExperts() = default;
  // Create's parts: the FP8 pass's buffers (with `spare` rows past
  // max_rows, zeroed), and the grouped GEMM's pointer arrays and padded
  // pass buffers (none, and no error, where cuBLAS has no grouped call).
  absl::Status AllocateFp8(int64_t spare);
  absl::Status SetUpGrouped(int max_graphs);

  struct Pass {  // one Run's arguments
    LtMatmul* lt;
    absl::Span<const CudaExpert* const> experts;
    absl::Span<const int64_t> offsets;
    const uint16_t* in;
    void* out;
    bool out_f32;
    cudaStream_t stream;
    const int32_t* gather = nullptr;
  };
  absl::Status RunFp8(const Pass& p);
  bool GroupedFits(const Pass& p) const;
  absl::Status RunEager(GemmPath path, const Pass& p);
  absl::Status RunLoop(const Pass& p);
  // The pointer arrays of a grouped pass into region `region` (0: eager;
  // 1 + slot: a graph's), copied on the pass's stream.
  absl::Status StagePointers(const Pass& p, int region);
  absl::Status RunGrouped(const Pass& p, int region);
  absl::Status Measure(const Pass& p);
  absl::Status Capture(GemmPath path, const Pass& p, int slot);
  // Captures body() as the graph of key_ and runs it; eager() instead when
  // the capture fails (the key then runs eagerly for good).
  absl::Status CaptureWith(const Pass& p, const char* what,
                           absl::FunctionRef<absl::Status()> body,
                           absl::FunctionRef<absl::Status()> eager);
  // A grouped pass in its padded form (pad_): staged, then replayed,
  // captured or run.
  absl::Status RunPadded(const Pass& p);
  absl::Status StagePadded(const Pass& p);
  absl::Status RunPaddedBody(const Pass& p);
  absl::Status RunPaddedEager(const Pass& p);
  void BuildKey(GemmPath path, const Pass& p);
  void GroupedFailed(const absl::Status& s);
  std::string PathSummary() const;  // the measured buckets, for the log

  int64_t max_rows_ = 0, hidden_ = 0, max_inter_ = 0, max_experts_ = 0;
  int64_t max_graph_rows_ = 0;
  DeviceBuffer gate_up_;  // bf16 [max_rows, 2 * max_inter]
  DeviceBuffer h_;        // bf16 [max_rows, max_inter]
  // FP8 (options.fp8): E4M3 rows [max_rows, H] and h [max_rows, Ik], their
  // scale tables, the down projection's bf16 output when fp32 is asked.
  bool fp8_ = false;
  DeviceBuffer xq_, xq_scale_, hq_, hq_scale_, down_;
  std::shared_ptr<SharedGemmPathTable> paths_;
  GemmPathTable::Mode mode_ = GemmPathTable::Mode::kAuto;  // this instance's
  GemmPath PathFor(int64_t rows) const;
  std::unique_ptr<GroupedGemm> grouped_;  // null: no grouped call here
  // Pointer arrays of the grouped call: 6 arrays of max_experts pointers
  // per region, staged through pinned memory; region 0 for eager passes,
  // one per graph slot.
  PinnedBuffer ptr_host_;
  DeviceBuffer ptr_dev_;
  cudaEvent_t staged_ = nullptr;  // the last staging copy has been read
  std::vector<int> group_rows_;   // rows of each expert with rows
  std::array<cudaEvent_t, 3> timing_{};
  std::unique_ptr<GraphCache<cudaGraphExec_t>> graphs_;
  // Padded grouped passes (graphs only): at most max_padded_rows_ rows,
  // gathered into pad_in_ and scattered from pad_out_ (bf16 [rows, H]) by
  // the row map pad_map_ (int32, staged through pad_map_host_).
  int64_t max_padded_rows_ = 0;
  DeviceBuffer pad_in_, pad_out_, pad_map_;
  PinnedBuffer pad_map_host_;
  PaddedPass pad_;
  GraphCache<cudaGraphExec_t>::Key key_;
};

}  // namespace moe
