#include "core/process_memory.h"

#include <fstream>
#include <string>

namespace moe {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  std::ifstream f("/proc/self/status");
  std::string line;
  // Lines read "VmRSS:\t  123456 kB".
  auto kib = [&](size_t prefix) {
    return std::stoll(line.substr(prefix)) * 1024;
  };
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss_bytes = kib(6);
    if (line.rfind("VmHWM:", 0) == 0) m.peak_rss_bytes = kib(6);
  }
  return m;
}

}  // namespace moe
