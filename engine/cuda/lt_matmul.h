// Row-major GEMMs through cuBLASLt: D[m, n] = X[m, k] W[n, k]^T, the shape of
// every projection in the layer (weights stored [out, in] as in HF).
//
// Plans (descriptor, layouts, the heuristic's algorithm) are cached per row
// bucket (engine/cuda/row_bucket.h: next power of two >= m, capped at the
// warmed max_rows), shape, types and pointer alignment (capped at 16 bytes,
// all cuBLASLt asks for). A call sets its own row count on the plan's X and
// D layouts; the algorithm the heuristic chose for the bucket's top row
// count was checked (cublasLtMatmulAlgoCheck) at both ends of the bucket
// when the plan was built, and a plan that failed either end is checked
// again per call, a call that fails it getting an algorithm of its own (not
// cached). Warm builds every bucket of the given shapes at load, so steps do
// not query the heuristic. The cache holds at most kMaxPlans plans and
// destroys the least recently used beyond that. The workspace is allocated
// once. Not thread-safe: one per stream (each backend fork has its own).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/device_buffer.h"

namespace moe {

// One GEMM shape for LtMatmul::Warm: D[m, n] = X[m, k] W[n, k]^T for every
// m in 1..max_rows.
struct LtShape {
  int64_t max_rows = 0;
  int64_t n = 0, k = 0;
  cudaDataType_t in = CUDA_R_16BF, out = CUDA_R_32F;
};

class LtMatmul {
 public:
  // Plans kept at once; enough for every bucket of a layer's shapes (about
  // six shapes times log2(max_rows) + 1 buckets) several times over.
  static constexpr size_t kMaxPlans = 512;

  static absl::StatusOr<std::unique_ptr<LtMatmul>> Create(
      size_t workspace_bytes = size_t{32} << 20);
  ~LtMatmul();

  // X and W of type `in` (CUDA_R_16BF, or CUDA_R_32F for the fp32 router;
  // CUDA_R_8F_E4M3 only through RunFp8),
  // D of type `out` (CUDA_R_32F or CUDA_R_16BF); fp32 accumulation, no
  // TF32. Does nothing when m is 0.
  absl::Status Run(int64_t m, int64_t n, int64_t k, const void* x,
                   const void* w, void* d, cudaDataType_t in,
                   cudaDataType_t out, cudaStream_t stream);

  // Block-scaled FP8 (sm_90 only; kernels/fp8_rule.h has the layouts): X
  // and W E4M3 (CUDA_R_8F_E4M3), W with one fp32 scale per 128 x 128 block
  // (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F), X with one per row per
  // 128 columns (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, the table of this
  // call's m rows), fp32 accumulation, D bf16. Pointers 16-byte aligned, k
  // and n multiples of 16 and 8 (the caller's layout guarantees both).
  absl::Status RunFp8(int64_t m, int64_t n, int64_t k, const void* x,
                      const float* x_scale, const void* w, const float* w_scale,
                      void* d, cudaStream_t stream);

  // Caps the row buckets at the largest max_rows of `shapes` (and of earlier
  // calls), then builds the plans of every bucket of each shape, for 16-byte
  // aligned pointers (what device buffers and row offsets of widths that are
  // multiples of 8 give; other alignments get their plans on first use).
  absl::Status Warm(absl::Span<const LtShape> shapes);

  size_t cached_plans() const { return plans_.size(); }
  // Heuristic queries so far (plans built, plus per-call fallbacks).
  int64_t heuristic_queries() const { return heuristic_queries_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool checked = false;  // algo valid at both ends of the bucket
    uint64_t last_use = 0;
  };
  // (row bucket, n, k, in, out, alignment of x, w, d)
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, uint32_t,
                         uint32_t, uint32_t>;
  absl::StatusOr<Plan*> GetPlan(const Key& key);
  // The row bucket of an m-row matmul with X of type `in`.
  int64_t BucketOf(int64_t m, cudaDataType_t in) const;
  // Descriptor and layouts for `rows` rows, and the heuristic's algorithm.
  absl::Status BuildPlan(const Key& key, int64_t rows, Plan* p);
  // BuildPlan's parts: the descriptor and layouts; the heuristic's choice
  // for pointers of those alignments (*found 0: none).
  cublasStatus_t Describe(cudaDataType_t in, cudaDataType_t out, int64_t n,
                          int64_t k, int64_t rows, Plan& p);
  cublasStatus_t Choose(uint32_t al_x, uint32_t al_w, uint32_t al_d, Plan& p,
                        int* found);
  absl::Status SetRows(Plan& p, int64_t rows);
  absl::Status RunImpl(int64_t m, int64_t n, int64_t k, const void* x,
                       const float* x_scale, const void* w,
                       const float* w_scale, void* d, cudaDataType_t in,
                       cudaDataType_t out, cudaStream_t stream);
  // Where the block-scaled matmul of `p` reads its scales (E4M3 plans).
  absl::Status SetScales(Plan& p, const float* x_scale, const float* w_scale);
  bool AlgoValid(const Plan& p);
  void Destroy(Plan& p);
  void EvictOldest();

  const CublasLtApi* api_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  int64_t max_rows_ = 0;  // bucket cap; 0 until Warm
  std::map<Key, Plan> plans_;
  uint64_t clock_ = 0;
  int64_t heuristic_queries_ = 0;
};

}  // namespace moe
