// The form a small grouped expert pass (decode sizes) takes so that one
// captured CUDA graph serves every pass of its bucket, whatever the
// per-expert row counts: the experts with rows become G = GroupBucket(their
// number) groups of C = RowBucket(the largest count) rows each. Row j of
// group i is row `row[i * C + j]` of the pass (gathered into a padded
// scratch, and its output scattered back), or padding (-1: zeros in,
// nothing out); groups past the experts with rows repeat the last one, on
// padding only. What varies from pass to pass (the row map, which experts'
// weights each group reads) lives in device memory, uploaded before the
// graph runs; what a capture bakes in (G, C, the buffers) is the key
// (PaddedGraphKey). At decode sizes the keys are few, so graphs replay
// (tests/engine/padded_pass_test.cc replays a decode routing trace). The
// padding costs GEMM rows, cheap at decode sizes where a GEMM's time is the
// reading of its weights, and padding groups, which read weights again: so
// groups round up by a quarter of the power of two below their number (at
// most 1.25x the experts with rows), rows per group by a power of two. Plain
// C++, no CUDA types: tested on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/cuda/row_bucket.h"

namespace moe {

// `active` groups rounded up to a multiple of a quarter of the power of two
// at or below it (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, ...), at
// most `experts`: at most 1.25x past 4, four sizes per octave.
inline int64_t GroupBucket(int64_t active, int64_t experts) {
  if (active <= 0) return 0;
  int64_t floor = 1;
  while (floor * 2 <= active) floor *= 2;
  const int64_t step = std::max<int64_t>(1, floor / 4);
  return std::min((active + step - 1) / step * step, experts);
}

struct PaddedPass {
  int64_t groups = 0;           // G
  int64_t group_rows = 0;       // C
  std::vector<int32_t> expert;  // [G]: index into the pass's experts
  std::vector<int32_t> row;     // [G * C]: row of the pass's in/out, or -1
  int64_t rows() const { return groups * group_rows; }
};

// The padded form of the pass whose expert g has rows [offsets[g],
// offsets[g+1]) (as CudaExperts::Run takes them). False, with *out
// untouched, when it has no rows or would exceed max_padded_rows: such a
// pass runs unpadded.
inline bool PlanPaddedPass(absl::Span<const int64_t> offsets,
                           int64_t max_padded_rows, PaddedPass* out) {
  const int64_t experts = static_cast<int64_t>(offsets.size()) - 1;
  int64_t active = 0, most = 0;
  for (int64_t g = 0; g < experts; ++g) {
    const int64_t n = offsets[g + 1] - offsets[g];
    if (n > 0) ++active;
    most = std::max(most, n);
  }
  if (active == 0) return false;
  const int64_t G = GroupBucket(active, experts), C = RowBucket(most, 0);
  if (G * C > max_padded_rows) return false;
  out->groups = G;
  out->group_rows = C;
  out->expert.assign(G, 0);
  out->row.assign(G * C, -1);
  int64_t i = 0;
  for (int64_t g = 0; g < experts; ++g) {
    const int64_t n = offsets[g + 1] - offsets[g];
    if (n == 0) continue;
    out->expert[i] = static_cast<int32_t>(g);
    for (int64_t j = 0; j < n; ++j) {
      out->row[i * C + j] = static_cast<int32_t>(offsets[g] + j);
    }
    ++i;
  }
  for (; i < G; ++i) out->expert[i] = out->expert[active - 1];
  return true;
}

// The graph-cache key of a padded pass: what its capture bakes in. `buffers`
// are the addresses it reads and writes (in, out, the workspace's, the
// GEMM handle's), `inter` the experts' intermediate size. Not the row
// counts, nor which experts: those are data the graph reads when it runs.
inline std::vector<uint64_t> PaddedGraphKey(
    const PaddedPass& p, int64_t inter, absl::Span<const uint64_t> buffers) {
  std::vector<uint64_t> key = {0x9add'ed00u, static_cast<uint64_t>(p.groups),
                               static_cast<uint64_t>(p.group_rows),
                               static_cast<uint64_t>(inter)};
  key.insert(key.end(), buffers.begin(), buffers.end());
  return key;
}

}  // namespace moe
