// This process's memory as the kernel counts it (Linux /proc/self/status):
// what moe-bench and GetModelInfo report, so the weight formats' footprints
// can be compared on the real process, not on a sum of buffer sizes.
#pragma once

#include <cstdint>

namespace moe {

struct ProcessMemory {
  int64_t rss_bytes = -1;       // VmRSS: resident now
  int64_t peak_rss_bytes = -1;  // VmHWM: the most ever resident
};

// -1 fields where /proc is not readable.
ProcessMemory ReadProcessMemory();

}  // namespace moe
