#include "tests/testutil/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace moe::testing {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Die with the test, whatever happens to it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    // Signals blocked in the test's threads stay blocked across exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  child->pid_ = pid;
  child->log_path_ = log_path;
  return child;
}

ChildProcess::~ChildProcess() { Stop(); }

bool ChildProcess::Running() {
  if (reaped_) return false;
  const pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

void ChildProcess::Signal(int sig) {
  if (Running()) kill(pid_, sig);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (Running()) {
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

void ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || !Running()) return;
  kill(pid_, SIGTERM);
  if (Wait(grace) == -1) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(5));
  }
}

std::string ChildProcess::Log() const {
  std::ifstream f(log_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout) {
  char path[] = "/tmp/moe_cmd_XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  CommandResult r;
  {
    auto child = ChildProcess::Start(argv, path);
    if (!child.ok()) return r;
    r.exit_code = (*child)->Wait(timeout);
    r.output = (*child)->Log();
  }
  unlink(path);
  return r;
}

}  // namespace moe::testing
