#include "bench/references.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"

namespace moe::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One thread's share of the read: XOR is associative, so the compiler
// vectorises without fast-math; the widest vector unit the CPU has is
// picked at load time, and a software prefetch 2 KiB ahead keeps enough
// requests in flight. Kept strong on purpose: the layer's weight bandwidth
// is reported as a ratio to it.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t XorRange(
    const uint64_t* p, size_t begin, size_t end) {
  uint64_t acc[8] = {};
  for (size_t i = begin; i < end; i += 8) {
    __builtin_prefetch(p + i + 256);
    for (int j = 0; j < 8; ++j) acc[j] ^= p[i + j];
  }
  uint64_t total = 0;
  for (uint64_t v : acc) total ^= v;
  return total;
}

}  // namespace

double MeasureSgemmGflops(int threads, int64_t n, int reps) {
  openblas_set_num_threads(threads);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {  // first call warms the thread pool
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = Seconds(t0, std::chrono::steady_clock::now());
    if (r > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

double MeasureReadGbps(int threads, size_t bytes, int reps) {
  const size_t words = bytes / sizeof(uint64_t);
  AlignedBuffer buf(words * sizeof(uint64_t));
  auto* p = reinterpret_cast<uint64_t*>(buf.data());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < words; ++i) p[i] = i;  // fault pages in
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(^ : total)
    {
      const size_t chunk = words / 8 / omp_get_num_threads() * 8;
      const size_t begin = chunk * omp_get_thread_num();
      const size_t end = omp_get_thread_num() == omp_get_num_threads() - 1
                             ? words
                             : begin + chunk;
      total ^= XorRange(p, begin, end);
    }
    sink = sink ^ total;
    best = std::max(
        best, bytes / Seconds(t0, std::chrono::steady_clock::now()) / 1e9);
  }
  return best;
}

}  // namespace moe::bench
