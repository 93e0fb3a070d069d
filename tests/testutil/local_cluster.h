// A router and P workers on loopback, as real processes, for integration
// tests. Everything started is stopped by pid when the cluster goes away.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/moe_client.h"
#include "tests/testutil/child_process.h"

namespace moe::testing {

// Paths of the binaries under test (set by CMake).
std::string RouterBinary();
std::string WorkerBinary();
std::string CliBinary();

class LocalCluster {
 public:
  struct Options {
    // Model flags for the router: {"--model", dir} or {"--synthetic", ...}.
    std::vector<std::string> model_args;
    int workers = 2;
    std::vector<std::string> router_args;  // more router flags
    int worker_threads = 1;
    std::chrono::milliseconds ready_timeout{60000};
  };

  LocalCluster();
  ~LocalCluster();

  // Starts the router on a free port, then the workers, and waits until the
  // service reports SERVING.
  absl::Status Start(const Options& options);
  absl::Status WaitReady(std::chrono::milliseconds timeout);

  const std::string& target() const { return target_; }
  // A scratch directory that lives as long as the cluster.
  const std::string& dir() const { return dir_; }
  MoeClient& client() { return *client_; }
  ChildProcess& router() { return *router_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  ChildProcess& worker(int i) { return *workers_[i]; }
  absl::Status StartWorker();  // one more worker process
  void KillWorker(int i, int sig);
  // Every process's log, for failure messages.
  std::string Logs() const;

 private:
  Options options_;
  std::string dir_;
  std::string target_;
  std::unique_ptr<ChildProcess> router_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<MoeClient> client_;
};

}  // namespace moe::testing
