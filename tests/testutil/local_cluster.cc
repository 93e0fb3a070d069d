#include "tests/testutil/local_cluster.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tests/testutil/hf_writer.h"

namespace moe::testing {

namespace {
// The build's path, or the same file name in $MOE_BIN_DIR when that is set
// (tests run from a release bundle, away from the build tree).
std::string Binary(const char* built) {
  const char* dir = std::getenv("MOE_BIN_DIR");
  if (dir == nullptr || *dir == '\0') return built;
  return (std::filesystem::path(dir) / std::filesystem::path(built).filename())
      .string();
}

// The router's --direct-step-tokens value for `o`, or "" for its default.
std::string DirectStepTokens(const LocalCluster::Options& o) {
  if (o.direct_step_tokens >= 0) return absl::StrCat(o.direct_step_tokens);
  const char* env = std::getenv("MOE_TEST_DIRECT_STEP_TOKENS");
  return env == nullptr ? "" : env;
}
}  // namespace

std::string RouterBinary() { return Binary(MOE_ROUTER_BIN); }
std::string WorkerBinary() { return Binary(MOE_WORKER_BIN); }
std::string CliBinary() { return Binary(MOE_CLI_BIN); }
std::string LoadtestBinary() { return Binary(MOE_LOADTEST_BIN); }

LocalCluster::LocalCluster() : dir_(MakeTempDir("cluster_")) {}

LocalCluster::~LocalCluster() {
  // Clients first: an open channel makes the router's graceful shutdown
  // wait out its deadline.
  client_.reset();
  health_client_.reset();
  workers_.clear();  // each stops its process
  router_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status LocalCluster::Start(const Options& options) {
  options_ = options;
  std::vector<std::string> argv = {
      RouterBinary(), "--listen=127.0.0.1:0", "--port-file=" + dir_ + "/port",
      absl::StrCat("--num-workers=", options.workers), "--threads=1"};
  if (options.device == "cuda") {
    argv.push_back("--device=cuda:0");
    argv.push_back("--weight-dtype=bf16");
  }
  if (options.worker_port) {
    argv.push_back("--worker-listen=127.0.0.1:0");
    argv.push_back("--worker-port-file=" + dir_ + "/worker_port");
  }
  if (options.health_port) {
    argv.push_back("--health-listen=127.0.0.1:0");
    argv.push_back("--health-port-file=" + dir_ + "/health_port");
  }
  argv.insert(argv.end(), options.model_args.begin(), options.model_args.end());
  if (const std::string direct = DirectStepTokens(options); !direct.empty()) {
    argv.push_back("--direct-step-tokens=" + direct);
  }
  argv.insert(argv.end(), options.router_args.begin(),
              options.router_args.end());
  auto router = ChildProcess::Start(argv, dir_ + "/router.log");
  if (!router.ok()) return router.status();
  router_ = std::move(*router);

  const auto end = std::chrono::steady_clock::now() + options.ready_timeout;
  // The router writes its port files once its listeners are up.
  auto read_port = [&](const std::string& name) -> absl::StatusOr<int> {
    while (true) {
      int port = 0;
      std::ifstream f(dir_ + "/" + name);
      if (f >> port && port > 0) return port;
      if (!router_->Running()) {
        return absl::InternalError("router exited:\n" + router_->Log());
      }
      if (std::chrono::steady_clock::now() > end) {
        return absl::DeadlineExceededError("router did not start:\n" +
                                           router_->Log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  auto port = read_port("port");
  if (!port.ok()) return port.status();
  target_ = absl::StrCat("127.0.0.1:", *port);
  worker_target_ = target_;
  if (options.worker_port) {
    auto wp = read_port("worker_port");
    if (!wp.ok()) return wp.status();
    worker_target_ = absl::StrCat("127.0.0.1:", *wp);
  }
  ClientOptions co = options.client;
  co.target = target_;
  client_ = std::make_unique<MoeClient>(co);
  if (options.health_port) {
    auto hp = read_port("health_port");
    if (!hp.ok()) return hp.status();
    health_port_ = *hp;
    ClientOptions ho;
    ho.target = absl::StrCat("127.0.0.1:", health_port_);
    health_client_ = std::make_unique<MoeClient>(ho);
  }
  for (int i = 0; i < options.workers; ++i) {
    MOE_RETURN_IF_ERROR(StartWorker());
  }
  return WaitReady(options.ready_timeout);
}

absl::Status LocalCluster::StartWorker() {
  return StartWorker(options_.worker_args);
}

absl::Status LocalCluster::StartWorker(const std::vector<std::string>& args) {
  const int index = static_cast<int>(workers_.size());
  std::vector<std::string> argv = {
      WorkerBinary(), "--router=" + worker_target_,
      absl::StrCat("--threads=", options_.worker_threads)};
  if (options_.device == "cuda") {
    const int gpus = std::max(options_.gpus, 1);
    argv.push_back(absl::StrCat("--device=cuda:", index % gpus));
    argv.push_back(options_.workers > gpus ? "--collective=gloo"
                                           : "--collective=nccl");
  }
  argv.insert(argv.end(), args.begin(), args.end());
  auto w =
      ChildProcess::Start(argv, absl::StrCat(dir_, "/worker", index, ".log"));
  if (!w.ok()) return w.status();
  workers_.push_back(std::move(*w));
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitReady(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  MoeClient& c = health_client_ ? *health_client_ : *client_;
  while (std::chrono::steady_clock::now() < end) {
    auto h = c.Health("", std::chrono::seconds(2));
    if (h.ok() && *h) return absl::OkStatus();
    if (!router_->Running())
      return absl::InternalError("router died:\n" + Logs());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError("cluster not ready in time:\n" + Logs());
}

void LocalCluster::KillWorker(int i, int sig) {
  workers_[i]->Signal(sig);
  workers_[i]->Wait(std::chrono::seconds(5));
}

std::string LocalCluster::Logs() const {
  std::string out = "--- router ---\n" + router_->Log();
  for (size_t i = 0; i < workers_.size(); ++i) {
    out += absl::StrCat("--- worker ", i, " ---\n", workers_[i]->Log());
  }
  return out;
}

}  // namespace moe::testing
