#include "engine/cuda/grouped_gemm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_status.h"

namespace moe {

absl::StatusOr<std::unique_ptr<GroupedGemm>> GroupedGemm::Create(
    int max_groups, size_t workspace_bytes) {
  MOE_ASSIGN_OR_RETURN(const CublasApi* api, Cublas());
  auto g = std::unique_ptr<GroupedGemm>(new GroupedGemm());
  g->api_ = api;
  MOE_CUBLAS_OK(api->Create(&g->handle_));
  // cuBLAS aligns a user workspace to 256 bytes at least: cudaMalloc's.
  MOE_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer::Allocate(workspace_bytes));
  const size_t G = std::max(max_groups, 1);
  g->ta_.assign(G, CUBLAS_OP_T);
  g->tb_.assign(G, CUBLAS_OP_N);
  for (auto* v : {&g->m_, &g->n_, &g->k_, &g->lda_, &g->ldb_, &g->ldc_}) {
    v->assign(G, 0);
  }
  g->group_size_.assign(G, 1);
  g->alpha_.assign(G, 1.0f);
  g->beta_.assign(G, 0.0f);
  return g;
}

GroupedGemm::~GroupedGemm() {
  if (handle_ != nullptr) api_->Destroy(handle_);
}

absl::Status GroupedGemm::Run(absl::Span<const int> rows, int n, int k,
                              const void* const* w, const void* const* x,
                              void* const* d, cudaStream_t stream) {
  const size_t G = rows.size();
  if (G == 0) return absl::OkStatus();
  if (G > m_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(G, " groups exceed the ", m_.size(), " sized for"));
  }
  if (!bound_ || stream != bound_stream_) {
    // Setting the stream resets the handle to cuBLAS's own workspace pool
    // (cublasSetStream), which allocates on first use: set ours after it.
    MOE_CUBLAS_OK(api_->SetStream(handle_, stream));
    MOE_CUBLAS_OK(
        api_->SetWorkspace(handle_, workspace_.data(), workspace_.size()));
    bound_stream_ = stream;
    bound_ = true;
  }
  // Column-major, as cuBLAS sees it (the layout of engine/cuda/lt_matmul.h):
  // D_i^T [n, rows_i] = W_i [k, n]^T X_i^T [k, rows_i]; W is row-major
  // [n, k] (ld k), X row-major [rows_i, k] (ld k), D row-major [rows_i, n]
  // (ld n).
  for (size_t i = 0; i < G; ++i) {
    m_[i] = n;
    n_[i] = rows[i];
    k_[i] = k;
    lda_[i] = k;
    ldb_[i] = k;
    ldc_[i] = n;
  }
  MOE_CUBLAS_OK(api_->GemmGroupedBatchedEx(
      handle_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(),
      alpha_.data(), w, CUDA_R_16BF, lda_.data(), x, CUDA_R_16BF, ldb_.data(),
      beta_.data(), d, CUDA_R_16BF, ldc_.data(), static_cast<int>(G),
      group_size_.data(), CUBLAS_COMPUTE_32F));
  return absl::OkStatus();
}

}  // namespace moe
