// The machine's own reference figures, measured in the same run as a
// benchmark so results are reported as ratios (DESIGN.md section 9).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe::bench {

// Best-of-`reps` OpenBLAS sgemm GFLOP/s on an n x n x n product with
// `threads` threads.
double MeasureSgemmGflops(int threads, int64_t n = 2048, int reps = 3);

// Best-of-`reps` streaming read bandwidth in GB/s over a buffer of `bytes`
// (well past the last-level cache), split over `threads` threads.
double MeasureReadGbps(int threads, size_t bytes = size_t{1} << 30,
                       int reps = 3);

}  // namespace moe::bench
