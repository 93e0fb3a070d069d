// Row buckets of the cuBLASLt plan cache (engine/cuda/lt_matmul.h): a GEMM
// of m rows runs the plan of RowBucket(m, max_rows), the next power of two
// >= m, capped at max_rows (the most rows the workspaces hold) so that the
// top bucket is max_rows itself. The expensive heuristic query then runs
// once per bucket, at load (LtMatmul::Warm), not once per row count a step
// happens to have. Plain C++, no CUDA types: tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace moe {

// 0 for m <= 0. max_rows <= 0 means no cap; m > max_rows (outside the
// workspaces, not expected) gets its own power of two.
inline int64_t RowBucket(int64_t m, int64_t max_rows) {
  if (m <= 0) return 0;
  int64_t b = 1;
  while (b < m) b <<= 1;
  if (max_rows > 0 && m <= max_rows && b > max_rows) return max_rows;
  return b;
}

// The smallest row count whose bucket is `bucket` (bucket itself a value of
// RowBucket): one more than the power of two below it.
inline int64_t RowBucketLow(int64_t bucket) {
  if (bucket <= 1) return bucket;
  int64_t p = 1;
  while (p * 2 < bucket) p <<= 1;
  return p + 1;
}

// Every bucket of 1..max_rows, ascending.
inline std::vector<int64_t> RowBuckets(int64_t max_rows) {
  std::vector<int64_t> out;
  for (int64_t m = 1; m <= max_rows; m = RowBucket(m, max_rows) + 1) {
    out.push_back(RowBucket(m, max_rows));
  }
  return out;
}

}  // namespace moe
