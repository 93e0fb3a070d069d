// Keeps a line that repeats from flooding the log (a standby worker is
// refused on every reconnect, twice a second): the first is logged, then at
// most one per `every` with the count of those left out in between; a
// different line is logged at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace moe {

class RepeatedLine {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RepeatedLine(Clock::duration every) : every_(every) {}
  // The text to log for `line` now, or "" to leave it out.
  std::string Next(const std::string& line, Clock::time_point now);
  // Forget the last line (the next one is logged whatever it is).
  void Reset();

 private:
  Clock::duration every_;
  std::string last_;
  Clock::time_point last_logged_{};
  int64_t suppressed_ = 0;
};

}  // namespace moe
