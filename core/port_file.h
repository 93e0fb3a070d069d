// Publishing a bound port for launchers and tests (--listen host:0).
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

namespace moe {

// Writes `port` to `path` atomically, so a reader never sees a partial
// file. Does nothing when `path` is empty.
inline void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  std::ofstream(path + ".tmp") << port << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace moe
