#include "engine/cuda/lt_matmul.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/row_bucket.h"
#include "kernels/fp8_rule.h"

namespace moe {
namespace {

// The largest power of two (up to 16) dividing the address: what the
// heuristic may assume about the pointer. cuBLASLt asks for at most 16
// bytes; telling it more would only split the cache.
constexpr uint32_t kMaxAlignment = 16;
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = kMaxAlignment;
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
  for (auto& [key, p] : plans_) Destroy(p);
  if (handle_ != nullptr) api_->Destroy(handle_);
}

void LtMatmul::Destroy(Plan& p) {
  if (p.w != nullptr) api_->MatrixLayoutDestroy(p.w);
  if (p.x != nullptr) api_->MatrixLayoutDestroy(p.x);
  if (p.d != nullptr) api_->MatrixLayoutDestroy(p.d);
  if (p.desc != nullptr) api_->MatmulDescDestroy(p.desc);
  p = Plan();
}

void LtMatmul::EvictOldest() {
  auto oldest = plans_.begin();
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  }
  if (oldest == plans_.end()) return;
  Destroy(oldest->second);
  plans_.erase(oldest);
}

absl::Status LtMatmul::SetRows(Plan& p, int64_t rows) {
  // Column-major views (see BuildPlan): the row count m is the column count
  // of X^T [k, m] and of D^T [n, m]; leading dimensions do not depend on it.
  const uint64_t cols = static_cast<uint64_t>(rows);
  MOE_CUBLAS_OK(api_->MatrixLayoutSetAttribute(p.x, CUBLASLT_MATRIX_LAYOUT_COLS,
                                               &cols, sizeof(cols)));
  MOE_CUBLAS_OK(api_->MatrixLayoutSetAttribute(p.d, CUBLASLT_MATRIX_LAYOUT_COLS,
                                               &cols, sizeof(cols)));
  return absl::OkStatus();
}

bool LtMatmul::AlgoValid(const Plan& p) {
  cublasLtMatmulHeuristicResult_t r = {};
  return api_->MatmulAlgoCheck(handle_, p.desc, p.w, p.x, p.d, p.d, &p.algo,
                               &r) == CUBLAS_STATUS_SUCCESS &&
         r.workspaceSize <= workspace_.size();
}

cublasStatus_t LtMatmul::Describe(cudaDataType_t in_t, cudaDataType_t out_t,
                                  int64_t n, int64_t k, int64_t rows, Plan& p) {
  // Column-major view: D^T [n, m] = W [n, k] X^T. W is stored row-major
  // [n, k], i.e. column-major [k, n] (ld k), used transposed; X likewise
  // [k, m] (ld k), used as is; D^T column-major [n, m] (ld n) is D row-major.
  cublasStatus_t st =
      api_->MatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v,
                 size_t size) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = api_->MatmulDescSetAttribute(p.desc, attr, v, size);
    }
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (in_t == CUDA_R_8F_E4M3) {
    // W = cuBLASLt's A (one scale per 128 x 128 block), X = its B (one per
    // 128 values of each column of the column-major view, i.e. per row per
    // 128 channels); both as int32_t, as the attributes are declared.
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode));
    // Real device memory behind the scale pointers while the heuristic
    // looks (it reads none); each call sets its own (SetScales).
    const void* placeholder = workspace_.data();
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder,
        sizeof(placeholder));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder,
        sizeof(placeholder));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api_->MatrixLayoutCreate(&p.w, in_t, k, n, k);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api_->MatrixLayoutCreate(&p.x, in_t, k, rows, k);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api_->MatrixLayoutCreate(&p.d, out_t, n, rows, n);
  }
  return st;
}

cublasStatus_t LtMatmul::Choose(uint32_t al_x, uint32_t al_w, uint32_t al_d,
                                Plan& p, int* found) {
  *found = 0;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = api_->MatmulPreferenceCreate(&pref);
  const uint64_t ws = workspace_.size();
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api_->MatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  }
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
  if (st == CUBLAS_STATUS_SUCCESS) {
    ++heuristic_queries_;
    st = api_->MatmulAlgoGetHeuristic(handle_, p.desc, p.w, p.x, p.d, p.d, pref,
                                      1, &result, found);
  }
  if (pref != nullptr) api_->MatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && *found > 0) p.algo = result.algo;
  return st;
}

absl::Status LtMatmul::BuildPlan(const Key& key, int64_t rows, Plan* out) {
  const auto [bucket, n, k, in, o, al_x, al_w, al_d] = key;
  const auto in_t = static_cast<cudaDataType_t>(in);
  // Block-scaled FP8 runs whole quanta of rows only (kernels/fp8_rule.h):
  // the plans of its buckets are built, and checked, at such a count.
  if (in_t == CUDA_R_8F_E4M3) rows = kernels::Fp8MatmulRows(rows);
  Plan p;
  cublasStatus_t st =
      Describe(in_t, static_cast<cudaDataType_t>(o), n, k, rows, p);
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) st = Choose(al_x, al_w, al_d, p, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    Destroy(p);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return CublasError(st, "cuBLASLt plan", __FILE__, __LINE__);
    }
    return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for [",
                                            rows, ", ", k, "] x [", n, ", ", k,
                                            "]^T"));
  }
  *out = p;
  return absl::OkStatus();
}

absl::StatusOr<LtMatmul::Plan*> LtMatmul::GetPlan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    it->second.last_use = ++clock_;
    return &it->second;
  }
  const int64_t bucket = std::get<0>(key);
  Plan p;
  MOE_RETURN_IF_ERROR(BuildPlan(key, bucket, &p));
  // The algorithm was chosen for the bucket's top row count; it serves the
  // whole bucket only if it also passes at the bottom (validity and
  // workspace grow with the row count, so both ends are checked). A plan
  // that fails is checked per call instead.
  p.checked = AlgoValid(p);
  int64_t low = RowBucketLow(bucket), top = bucket;
  if (static_cast<cudaDataType_t>(std::get<3>(key)) == CUDA_R_8F_E4M3) {
    low = kernels::Fp8MatmulRows(low);
    top = kernels::Fp8MatmulRows(top);
  }
  if (p.checked && low < top) {
    if (absl::Status s = SetRows(p, low); !s.ok()) {
      Destroy(p);
      return s;
    }
    p.checked = AlgoValid(p);
  }
  while (plans_.size() >= kMaxPlans) EvictOldest();
  p.last_use = ++clock_;
  return &plans_.emplace(key, p).first->second;
}

int64_t LtMatmul::BucketOf(int64_t m, cudaDataType_t in) const {
  // Block-scaled FP8 runs whole quanta of rows (RunFp8 refuses others): its
  // buckets go up to the quantum above max_rows_, so that every padded pass
  // finds a warmed plan.
  return RowBucket(
      m, in == CUDA_R_8F_E4M3 ? kernels::Fp8MatmulRows(max_rows_) : max_rows_);
}

absl::Status LtMatmul::Warm(absl::Span<const LtShape> shapes) {
  for (const LtShape& s : shapes) max_rows_ = std::max(max_rows_, s.max_rows);
  for (const LtShape& s : shapes) {
    const bool fp8 = s.in == CUDA_R_8F_E4M3;
    const int64_t top = fp8 ? kernels::Fp8MatmulRows(s.max_rows) : s.max_rows;
    for (int64_t m = fp8 ? kernels::kFp8RowQuantum : 1; m <= top;) {
      const int64_t bucket = BucketOf(m, s.in);
      MOE_RETURN_IF_ERROR(GetPlan(Key{bucket, s.n, s.k, static_cast<int>(s.in),
                                      static_cast<int>(s.out), kMaxAlignment,
                                      kMaxAlignment, kMaxAlignment})
                              .status());
      m = bucket + 1;
    }
  }
  return absl::OkStatus();
}

absl::Status LtMatmul::SetScales(Plan& p, const float* x_scale,
                                 const float* w_scale) {
  const void* a = w_scale;
  const void* b = x_scale;
  MOE_CUBLAS_OK(api_->MatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a, sizeof(a)));
  MOE_CUBLAS_OK(api_->MatmulDescSetAttribute(
      p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b, sizeof(b)));
  return absl::OkStatus();
}

absl::Status LtMatmul::Run(int64_t m, int64_t n, int64_t k, const void* x,
                           const void* w, void* d, cudaDataType_t in,
                           cudaDataType_t out, cudaStream_t stream) {
  if (in == CUDA_R_8F_E4M3) {
    return absl::InvalidArgumentError(
        "E4M3 matmuls need their block scales: LtMatmul::RunFp8");
  }
  return RunImpl(m, n, k, x, nullptr, w, nullptr, d, in, out, stream);
}

absl::Status LtMatmul::RunFp8(int64_t m, int64_t n, int64_t k, const void* x,
                              const float* x_scale, const void* w,
                              const float* w_scale, void* d,
                              cudaStream_t stream) {
  if (x_scale == nullptr || w_scale == nullptr) {
    return absl::InvalidArgumentError(
        "a block-scaled FP8 matmul needs both scale tables");
  }
  if (m % kernels::kFp8RowQuantum != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a block-scaled FP8 matmul runs a multiple of ",
        kernels::kFp8RowQuantum, " rows (kernels::Fp8MatmulRows), got ", m));
  }
  return RunImpl(m, n, k, x, x_scale, w, w_scale, d, CUDA_R_8F_E4M3,
                 CUDA_R_16BF, stream);
}

absl::Status LtMatmul::RunImpl(int64_t m, int64_t n, int64_t k, const void* x,
                               const float* x_scale, const void* w,
                               const float* w_scale, void* d, cudaDataType_t in,
                               cudaDataType_t out, cudaStream_t stream) {
  if (m == 0 || n == 0) return absl::OkStatus();
  const bool scaled = in == CUDA_R_8F_E4M3;
  const Key key{BucketOf(m, in),
                n,
                k,
                static_cast<int>(in),
                static_cast<int>(out),
                Alignment(x),
                Alignment(w),
                Alignment(d)};
  MOE_ASSIGN_OR_RETURN(Plan * p, GetPlan(key));
  MOE_RETURN_IF_ERROR(SetRows(*p, m));
  const float alpha = 1.0f, beta = 0.0f;
  if (!p->checked && !AlgoValid(*p)) {
    // The bucket's algorithm does not serve this row count: one of its own,
    // built for this call only.
    Plan own;
    MOE_RETURN_IF_ERROR(BuildPlan(key, m, &own));
    if (scaled) {
      if (absl::Status s = SetScales(own, x_scale, w_scale); !s.ok()) {
        Destroy(own);
        return s;
      }
    }
    const cublasStatus_t st = api_->Matmul(
        handle_, own.desc, &alpha, w, own.w, x, own.x, &beta, d, own.d, d,
        own.d, &own.algo, workspace_.data(), workspace_.size(), stream);
    Destroy(own);  // host descriptors: free once the call has been enqueued
    if (st != CUBLAS_STATUS_SUCCESS) {
      return CublasError(st, "cublasLtMatmul", __FILE__, __LINE__);
    }
    return absl::OkStatus();
  }
  if (scaled) MOE_RETURN_IF_ERROR(SetScales(*p, x_scale, w_scale));
  MOE_CUBLAS_OK(api_->Matmul(handle_, p->desc, &alpha, w, p->w, x, p->x, &beta,
                             d, p->d, d, p->d, &p->algo, workspace_.data(),
                             workspace_.size(), stream));
  return absl::OkStatus();
}

}  // namespace moe
