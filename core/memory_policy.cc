#include "core/memory_policy.h"

#include <malloc.h>

namespace moe {

void KeepFreedMemoryForReuse() {
  // Setting either threshold also turns off glibc's dynamic adjustment.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // larger blocks still get mmap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // return heap tops above 1 GiB only
}

}  // namespace moe
