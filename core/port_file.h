// Publishing a bound port for launchers and tests (--listen host:0).
#pragma once

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

// Writes `port` to `path` atomically, so a reader never sees a partial
// file: written to `path`.tmp, flushed, closed, then renamed over `path`.
// OK and nothing written when `path` is empty; otherwise an error naming
// the file and the step that failed (the temporary file is removed).
[[nodiscard]] inline absl::Status WritePortFile(const std::string& path,
                                                int port) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* step) {
    const int err = errno != 0 ? errno : EIO;  // never an OK status
    std::remove(tmp.c_str());
    return absl::ErrnoToStatus(
        err, absl::StrCat("port file ", path, ": ", step, " ", tmp));
  };
  errno = 0;
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return fail("cannot create");
  const bool written = std::fprintf(f, "%d\n", port) > 0;
  const bool flushed = std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed) return fail("cannot write");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail("cannot rename into place");
  }
  return absl::OkStatus();
}

}  // namespace moe
