// A router and P workers on loopback, as real processes, for integration
// tests. Everything started is stopped by pid when the cluster goes away.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/moe_client.h"
#include "tests/testutil/child_process.h"

namespace moe::testing {

// Paths of the binaries under test: set by CMake, or taken from the directory
// in env MOE_BIN_DIR when that is set (a release bundle's bin/).
std::string RouterBinary();
std::string WorkerBinary();
std::string CliBinary();
std::string LoadtestBinary();

class LocalCluster {
 public:
  struct Options {
    // Model flags for the router: {"--model", dir} or {"--synthetic", ...}.
    std::vector<std::string> model_args;
    int workers = 2;
    std::vector<std::string> router_args;  // more router flags
    std::vector<std::string> worker_args;  // more worker flags
    // Workers register on a port of their own (--worker-listen), and the
    // router serves plaintext health on another (--health-listen), which
    // WaitReady then polls.
    bool worker_port = false;
    bool health_port = false;
    ClientOptions client;  // credentials and token for client()
    // "cuda": bf16 weights, the router on cuda:0 and worker i on
    // cuda:(i % gpus); with fewer GPUs than workers the workers exchange
    // through pinned host memory (--collective gloo), else over NCCL.
    std::string device = "cpu";
    int gpus = 1;
    int worker_threads = 1;
    // The router's --direct-step-tokens, before router_args (which may
    // override it); < 0: env MOE_TEST_DIRECT_STEP_TOKENS when set (the GPU
    // check forces the all-to-all path of whole test binaries with 0), else
    // the router's default.
    int64_t direct_step_tokens = -1;
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
  // One more worker with its own flags (instead of Options::worker_args).
  absl::Status StartWorker(const std::vector<std::string>& args);
  const std::string& worker_target() const { return worker_target_; }
  int health_port() const { return health_port_; }
  void KillWorker(int i, int sig);
  // Every process's log, for failure messages.
  std::string Logs() const;

 private:
  Options options_;
  std::string dir_;
  std::string target_;
  std::string worker_target_;
  int health_port_ = 0;
  std::unique_ptr<MoeClient> health_client_;
  std::unique_ptr<ChildProcess> router_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<MoeClient> client_;
};

}  // namespace moe::testing
