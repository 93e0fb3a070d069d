#include "worker/repeated_line.h"

#include "absl/strings/str_cat.h"

namespace moe {

std::string RepeatedLine::Next(const std::string& line, Clock::time_point now) {
  if (line == last_ && now - last_logged_ < every_) {
    ++suppressed_;
    return "";
  }
  std::string out = line;
  if (suppressed_ > 0) {
    absl::StrAppend(
        &out,
        line == last_
            ? absl::StrCat(" (", suppressed_, " more like it in the last ",
                           std::chrono::duration_cast<std::chrono::seconds>(
                               now - last_logged_)
                               .count(),
                           " s not logged)")
            : absl::StrCat(" (the previous line came ", suppressed_,
                           " more times, not logged)"));
  }
  last_ = line;
  last_logged_ = now;
  suppressed_ = 0;
  return out;
}

void RepeatedLine::Reset() {
  last_.clear();
  suppressed_ = 0;
}

}  // namespace moe
