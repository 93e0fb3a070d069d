// The machine's own reference figures, measured in the same run as a
// benchmark so results are reported as ratios (docs/architecture.md
// section 8). One shot at a time, so that a benchmark can interleave them
// with its own steps: on a shared or frequency-scaling machine both then see
// the same conditions, and medians of the two series compare like with like.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"

namespace moe::bench {

class MachineReferences {
 public:
  // OpenBLAS sgemm on n x n x n, and a streaming read of `read_bytes`
  // (well past the last-level cache), both on `threads` threads.
  explicit MachineReferences(int threads, int64_t sgemm_n = 2048,
                             size_t read_bytes = size_t{1} << 30);

  // GFLOP/s of one sgemm.
  double SgemmGflops();
  // GB/s of one pass over the read buffer.
  double ReadGbps();

 private:
  int threads_;
  int64_t n_;
  std::vector<float> a_, b_, c_;
  AlignedBuffer read_;
};

double Median(std::vector<double> v);

}  // namespace moe::bench
