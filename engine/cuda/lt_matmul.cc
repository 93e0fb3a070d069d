#include "engine/cuda/lt_matmul.h"

#include "absl/strings/str_cat.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/cuda_status.h"

namespace moe {
namespace {

// The largest power of two (up to 256) dividing the address: what the
// heuristic may assume about the pointer.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LtMatmul>> LtMatmul::Create(
    size_t workspace_bytes) {
  auto api = CublasLt();
  if (!api.ok()) return api.status();
  auto lt = std::unique_ptr<LtMatmul>(new LtMatmul());
  lt->api_ = *api;
  MOE_CUBLAS_OK(lt->api_->Create(&lt->handle_));
  auto ws = DeviceBuffer::Allocate(workspace_bytes);
  if (!ws.ok()) return ws.status();
  lt->workspace_ = std::move(*ws);
  return lt;
}

LtMatmul::~LtMatmul() {
  for (auto& [key, p] : plans_) {
    api_->MatrixLayoutDestroy(p.w);
    api_->MatrixLayoutDestroy(p.x);
    api_->MatrixLayoutDestroy(p.d);
    api_->MatmulDescDestroy(p.desc);
  }
  if (handle_ != nullptr) api_->Destroy(handle_);
}

absl::StatusOr<const LtMatmul::Plan*> LtMatmul::GetPlan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  const auto [m, n, k, in, out, al_x, al_w, al_d] = key;
  Plan p;
  // Column-major view: D^T [n, m] = W [n, k] X^T. W is stored row-major
  // [n, k], i.e. column-major [k, n] (ld k), used transposed; X likewise
  // [k, m] (ld k), used as is; D^T column-major [n, m] (ld n) is D row-major.
  MOE_CUBLAS_OK(
      api_->MatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MOE_CUBLAS_OK(api_->MatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MOE_CUBLAS_OK(api_->MatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const auto in_t = static_cast<cudaDataType_t>(in);
  const auto out_t = static_cast<cudaDataType_t>(out);
  MOE_CUBLAS_OK(api_->MatrixLayoutCreate(&p.w, in_t, k, n, k));
  MOE_CUBLAS_OK(api_->MatrixLayoutCreate(&p.x, in_t, k, m, k));
  MOE_CUBLAS_OK(api_->MatrixLayoutCreate(&p.d, out_t, n, m, n));
  cublasLtMatmulPreference_t pref;
  MOE_CUBLAS_OK(api_->MatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_.size();
  cublasStatus_t st = api_->MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto [attr, al] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_w},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_x},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d}}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = api_->MatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
    }
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api_->MatmulAlgoGetHeuristic(handle_, p.desc, p.w, p.x, p.d, p.d, pref,
                                      1, &result, &found);
  }
  api_->MatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    api_->MatrixLayoutDestroy(p.w);
    api_->MatrixLayoutDestroy(p.x);
    api_->MatrixLayoutDestroy(p.d);
    api_->MatmulDescDestroy(p.desc);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return CublasError(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__,
                         __LINE__);
    }
    return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for [",
                                            m, ", ", k, "] x [", n, ", ", k,
                                            "]^T"));
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

absl::Status LtMatmul::Run(int64_t m, int64_t n, int64_t k, const void* x,
                           const void* w, void* d, cudaDataType_t in,
                           cudaDataType_t out, cudaStream_t stream) {
  if (m == 0 || n == 0) return absl::OkStatus();
  auto plan = GetPlan(Key{m, n, k, static_cast<int>(in), static_cast<int>(out),
                          Alignment(x), Alignment(w), Alignment(d)});
  if (!plan.ok()) return plan.status();
  const float alpha = 1.0f, beta = 0.0f;
  const Plan& p = **plan;
  MOE_CUBLAS_OK(api_->Matmul(handle_, p.desc, &alpha, w, p.w, x, p.x, &beta, d,
                             p.d, d, p.d, &p.algo, workspace_.data(),
                             workspace_.size(), stream));
  return absl::OkStatus();
}

}  // namespace moe
