#include "bench/fma_peak.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <chrono>

namespace moe::bench {
namespace {

constexpr int64_t kIters = 1 << 22;

// 12 independent accumulators: enough to cover FMA latency (4 cycles) on
// two ports. Returns a value the compiler cannot drop.
__attribute__((target("avx512f"))) float Avx512(int64_t iters) {
  __m512 acc[12];
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float Avx2(int64_t iters) {
  __m256 acc[12];
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

float Scalar(int64_t iters) {
  float acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = static_cast<float>(j);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j)
      acc[j] = __builtin_fmaf(acc[j], 0.999999f, 1e-7f);
  }
  return acc[0] + acc[11];
}

}  // namespace

double FmaPeakGflops(const std::string& isa, int threads) {
  int lanes = 1;
  float (*loop)(int64_t) = Scalar;
  if (isa == "avx512") {
    if (!__builtin_cpu_supports("avx512f")) return 0;
    lanes = 16;
    loop = Avx512;
  } else if (isa == "avx2") {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
      return 0;
    }
    lanes = 8;
    loop = Avx2;
  }
  static volatile float sink = 0;
  const int64_t iters = isa == "generic" ? kIters / 8 : kIters;
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += loop(iters);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  sink = sink + total;
  return 2.0 * lanes * 12 * static_cast<double>(iters) * threads / s / 1e9;
}

std::string OpenblasCore() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

}  // namespace moe::bench
