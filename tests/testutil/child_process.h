// A child process for multi-process tests: started with its output in a log
// file, killed with the test (PR_SET_PDEATHSIG), and stopped by pid when the
// object goes away (SIGTERM, then SIGKILL).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::testing {

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool Running();
  void Signal(int sig);
  // Waits for exit; returns the exit code (or 128 + signal), -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL; idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(3));
  std::string Log() const;

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string log_path_;
};

// Runs a command to completion (with a timeout), capturing stdout+stderr.
struct CommandResult {
  int exit_code = -1;  // -1: timed out (and killed)
  std::string output;
};
CommandResult RunCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout);

}  // namespace moe::testing
