// Probe: which cuBLASLt block-scaled FP8 configurations this GPU/cuBLASLt
// accepts, and which scale layouts give the right numbers.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                       \
  do {                                                              \
    auto e = (x);                                                   \
    if (e != cudaSuccess) {                                         \
      printf("cuda %s line %d\n", cudaGetErrorString(e), __LINE__); \
      exit(1);                                                      \
    }                                                               \
  } while (0)
static cublasLtHandle_t lt;
static void* ws;
static size_t ws_bytes = 32 << 20;

// combo 0: A = W [k x n col-major, op T], BLK128x128; B = X [k x m, op N],
// VEC128; D [n x m] (row-major [m, n]). combo 1: A = X [k x m, op T], VEC128; B
// = W [k x n, op N], BLK128x128; D [m x n] col-major.
struct Res {
  cublasStatus_t st;
  int found;
};
static Res Try(int combo, int m, int n, int k, bool align_pref, const void* A,
               const void* B, const float* as, const float* bs, void* D,
               bool run) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                 sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                 sizeof(tb));
  int32_t am = combo == 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                          : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  int32_t bm = combo == 0 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                          : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am,
                                 sizeof(am));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm,
                                 sizeof(bm));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                 &as, sizeof(as));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                 &bs, sizeof(bs));
  int64_t acols = combo == 0 ? n : m, bcols = combo == 0 ? m : n,
          drows = combo == 0 ? n : m, dcols = combo == 0 ? m : n;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, acols, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, bcols, k);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, drows, dcols, drows);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref,
                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &ws_bytes, sizeof(ws_bytes));
  if (align_pref) {
    uint32_t al = 16;
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, a, &al, sizeof(al));
  }
  cublasLtMatmulHeuristicResult_t r = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld,
                                                     pref, 1, &r, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found && run) {
    float alpha = 1, beta = 0;
    st = cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld,
                        &r.algo, ws, ws_bytes, 0);
    CK(cudaDeviceSynchronize());
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return {st, found};
}

static float Bf(__nv_bfloat16 v) { return __bfloat162float(v); }

// Numerics: X [m, k], W [n, k] random E4M3 codes with random block scales;
// weight scale table row stride wld (ceil(k/128) or rounded to 4), activation
// table stride xld (m or m rounded to 4).
static void Numerics(int combo, int m, int n, int k, bool wround, bool xround) {
  const int kb = (k + 127) / 128, nb = (n + 127) / 128;
  const int wld = wround ? (kb + 3) / 4 * 4 : kb;
  const int xld = xround ? (m + 3) / 4 * 4 : m;
  std::mt19937 g(m * 131 + n * 7 + k);
  std::uniform_real_distribution<float> u(-2, 2), su(0.25f, 4.f);
  std::vector<__nv_fp8_e4m3> x(m * (size_t)k), w(n * (size_t)k);
  for (auto& v : x) v = __nv_fp8_e4m3(u(g));
  for (auto& v : w) v = __nv_fp8_e4m3(u(g));
  std::vector<float> xs(xld * (size_t)kb + 64, 1.f),
      wsc(nb * (size_t)wld + 64, 1.f);
  for (int b = 0; b < kb; ++b)
    for (int r = 0; r < m; ++r) xs[b * xld + r] = su(g);
  for (int rb = 0; rb < nb; ++rb)
    for (int b = 0; b < kb; ++b) wsc[rb * wld + b] = su(g);
  std::vector<double> ref(m * (size_t)n);
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int c = 0; c < k; ++c)
        s += (double)float(x[r * (size_t)k + c]) * xs[(c / 128) * xld + r] *
             (double)float(w[j * (size_t)k + c]) *
             wsc[(j / 128) * wld + c / 128];
      ref[r * (size_t)n + j] = s;
    }
  void *dx, *dw, *dd;
  float *dxs, *dws;
  CK(cudaMalloc(&dx, x.size()));
  CK(cudaMalloc(&dw, w.size()));
  CK(cudaMalloc(&dd, m * (size_t)n * 2));
  CK(cudaMalloc(&dxs, xs.size() * 4));
  CK(cudaMalloc(&dws, wsc.size() * 4));
  CK(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dxs, xs.data(), xs.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dws, wsc.data(), wsc.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dd, 0, m * (size_t)n * 2));
  Res rr = combo == 0 ? Try(0, m, n, k, true, dw, dx, dws, dxs, dd, true)
                      : Try(1, m, n, k, true, dx, dw, dxs, dws, dd, true);
  std::vector<__nv_bfloat16> d(m * (size_t)n);
  CK(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost));
  double e2 = 0, r2 = 0;
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) {
      double got =
          combo == 0 ? Bf(d[r * (size_t)n + j]) : Bf(d[r + (size_t)j * m]);
      double want = ref[r * (size_t)n + j];
      e2 += (got - want) * (got - want);
      r2 += want * want;
    }
  printf(
      "numerics combo=%d m=%d n=%d k=%d wround=%d xround=%d: st=%d found=%d "
      "relrms=%.5f\n",
      combo, m, n, k, wround, xround, rr.st, rr.found,
      std::sqrt(e2 / (r2 + 1e-30)));
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dd);
  cudaFree(dxs);
  cudaFree(dws);
}

int main() {
  int ver = cublasLtGetVersion();
  printf("cublasLt version %d\n", ver);
  cublasLtCreate(&lt);
  CK(cudaMalloc(&ws, ws_bytes));
  void* buf;
  CK(cudaMalloc(&buf, 64 << 20));
  const float* sc = (const float*)buf;
  int ms[] = {1, 2, 3, 4, 5, 8, 16, 17, 32, 64, 128, 256, 1024};
  int nk[][2] = {
      {256, 128}, {256, 384}, {4096, 7168}, {7168, 2048}, {2 * 1408, 2048}};
  for (int combo = 0; combo < 2; ++combo)
    for (int ap = 0; ap < 2; ++ap)
      for (auto& p : nk) {
        printf("heur combo=%d align_pref=%d n=%d k=%d:", combo, ap, p[0], p[1]);
        for (int m : ms) {
          Res r = Try(combo, m, p[0], p[1], ap, buf, buf, sc, sc, buf, false);
          printf(" m%d:%d/%d", m, r.st, r.found);
        }
        printf("\n");
      }
  for (int combo = 0; combo < 2; ++combo)
    for (int m : {1, 5, 16, 130})
      for (int wr = 0; wr < 2; ++wr)
        for (int xr = 0; xr < 2; ++xr)
          Numerics(combo, m, 256 + 128, 384, wr, xr);
  return 0;
}
