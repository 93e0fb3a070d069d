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

MachineReferences::MachineReferences(int threads, int64_t sgemm_n,
                                     size_t read_bytes)
    : threads_(threads),
      n_(sgemm_n),
      a_(sgemm_n * sgemm_n, 0.5f),
      b_(sgemm_n * sgemm_n, 0.25f),
      c_(sgemm_n * sgemm_n),
      read_(read_bytes / sizeof(uint64_t) * sizeof(uint64_t)) {
  auto* p = reinterpret_cast<uint64_t*>(read_.data());
  const size_t words = read_.size() / sizeof(uint64_t);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < words; ++i) p[i] = i;  // fault pages in
  SgemmGflops();                                // warms OpenBLAS's thread pool
}

double MachineReferences::SgemmGflops() {
  openblas_set_num_threads(threads_);
  const int64_t n = n_;
  const auto t0 = std::chrono::steady_clock::now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a_.data(),
              n, b_.data(), n, 0.0f, c_.data(), n);
  return 2.0 * n * n * n / Seconds(t0, std::chrono::steady_clock::now()) / 1e9;
}

double MachineReferences::ReadGbps() {
  const auto* p = reinterpret_cast<const uint64_t*>(read_.data());
  const size_t words = read_.size() / sizeof(uint64_t);
  static volatile uint64_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0;
#pragma omp parallel num_threads(threads_) reduction(^ : total)
  {
    const size_t chunk = words / 8 / omp_get_num_threads() * 8;
    const size_t begin = chunk * omp_get_thread_num();
    const size_t end = omp_get_thread_num() == omp_get_num_threads() - 1
                           ? words
                           : begin + chunk;
    total ^= XorRange(p, begin, end);
  }
  sink = sink ^ total;
  return read_.size() / Seconds(t0, std::chrono::steady_clock::now()) / 1e9;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace moe::bench
