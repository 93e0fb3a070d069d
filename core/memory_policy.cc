#include "core/memory_policy.h"

#include <malloc.h>

namespace moe {

void KeepFreedMemoryForReuse() {
  // Setting either threshold also turns off glibc's dynamic adjustment.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // larger blocks still get mmap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // return heap tops above 1 GiB only
  // One arena. Blocks of a step's size (a 4096-token step's rows are
  // 16-32 MB) in a thread's own arena live in a heap of at most 64 MB that
  // glibc unmaps as soon as it is empty, whatever the trim threshold: every
  // request then faults its buffers in again (bench/data-path.sh, N=4096:
  // 9,800 minor faults per request in the router, 870 in a worker, with
  // one arena per core; about 0 with one). The main arena grows with brk
  // and keeps its top below the trim threshold. Small blocks still come
  // from each thread's cache without the arena lock. (Before: one arena
  // per core instead of glibc's eight, against slow RSS growth under
  // variable-sized requests, bench/soak.sh; one arena holds that too.)
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace moe
