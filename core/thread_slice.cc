#include "core/thread_slice.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace moe {
namespace {

#if defined(__linux__) && defined(SYS_sched_setattr) && \
    defined(SYS_sched_getattr)
// The kernel's struct sched_attr (include/uapi/linux/sched/types.h); glibc
// 2.36 has no wrapper for it.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // SCHED_OTHER/BATCH since 6.12: the slice, ns
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
#endif

}  // namespace

double ThreadSliceUs() {
  std::ifstream in("/proc/thread-self/sched");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("se.slice", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return -1;
    try {
      return std::stod(line.substr(colon + 1)) / 1000.0;
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

bool SetThreadRole(ThreadRole role) {
#if defined(__linux__) && defined(SYS_sched_setattr) && \
    defined(SYS_sched_getattr)
  SchedAttr attr;
  std::memset(&attr, 0, sizeof(attr));
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) return false;
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) {
    return false;  // real-time or idle: the operator's choice, left alone
  }
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  // 0: the kernel's default slice.
  attr.sched_runtime = role == ThreadRole::kLatency
                           ? static_cast<uint64_t>(kLatencySliceUs * 1000)
                           : 0;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
#else
  (void)role;
  return false;
#endif
}

}  // namespace moe
