// How the service splits a count over ranks: rank q of P gets
// [q*n/P, (q+1)*n/P). The router's token shards, the experts each worker
// owns, and the worker's own dispatch plan must all agree on it.
#pragma once

#include <cstdint>

namespace moe {

// First item of part `part` of `parts` over `count` items.
inline int64_t SplitBegin(int64_t part, int64_t parts, int64_t count) {
  return part * count / parts;
}

// The part that holds item `item`.
inline int SplitOwner(int64_t item, int parts, int64_t count) {
  int q = static_cast<int>(item * parts / count);
  // Integer division can land one part off; settle on the exact owner.
  while (q > 0 && SplitBegin(q, parts, count) > item) --q;
  while (q + 1 < parts && SplitBegin(q + 1, parts, count) <= item) ++q;
  return q;
}

}  // namespace moe
