#include "core/openmp_policy.h"

#include <unistd.h>

#include <cstdlib>

namespace moe {

void ShortenOpenMpSpinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr ||
      std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  if (setenv("GOMP_SPINCOUNT", "10000", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: exec failed (no /proc?). Run on with libgomp's default; the
  // variable set above reaches only child processes.
}

}  // namespace moe
