// A worker process's life: dial the router, register, take assignments
// (load experts, join the collective group), run steps in order, answer;
// reconnect when the router goes away.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/blocking_queue.h"
#include "core/model_location.h"
#include "moe/v1/worker.grpc.pb.h"
#include "worker/step_executor.h"
#include "worker/worker_metrics.h"

namespace moe {

struct WorkerOptions {
  std::string router;  // host:port
  std::string device = "cpu";
  // Sent at registration: the device's identity (empty on a CPU) and whether
  // this worker may share it (host-staged exchange).
  std::string device_identity;
  bool shares_device = true;
  int threads = 1;
  // Address the other workers reach this one's collective transport on;
  // "auto": the local address of the interface that reaches the router,
  // looked up at each session.
  std::string collective_host = "auto";
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: insecure
  std::string server_name;  // TLS: name to verify instead of the router's
  // Sent as "authorization: Bearer <token>" on every WorkerControl call
  // (the router's --worker-token-file); empty: none.
  std::string auth_token;
  std::chrono::milliseconds reconnect_delay{500};
  int max_message_bytes = 256 << 20;
  // Caps the Assignment's max_batch_tokens (0: take the router's): the
  // worker sizes its workspaces for, and accepts steps of, at most this many
  // rows; a bigger step is refused with RESOURCE_EXHAUSTED.
  int64_t max_batch_tokens = 0;
  WorkerMetrics* metrics = nullptr;  // may be null
  // Told whether the worker is in a ready collective group (health).
  std::function<void(bool ready)> on_ready;
};

// Keeps a line that repeats from flooding the log (a standby worker is
// refused on every reconnect, twice a second): the first is logged, then at
// most one per `every` with the count of those left out in between; a
// different line is logged at once.
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

class WorkerAgent {
 public:
  WorkerAgent(WorkerOptions options, std::unique_ptr<StepExecutor> executor);
  // Serves until Shutdown().
  void Run();
  // Callable from any thread: ends the session and Run(). A step (or group
  // assignment) being executed is finished and answered first; steps queued
  // behind it are not started. The worker then closes its stream, and the
  // router regroups without it.
  void Shutdown();

 private:
  void Session();
  void Execute(const moe::v1::RouterMessage& msg,
               grpc::ClientReaderWriter<moe::v1::WorkerMessage,
                                        moe::v1::RouterMessage>* stream);
  void Assign(const moe::v1::Assignment& a, moe::v1::Ready* ready);
  void SetReady(bool ready);
  // The generation of an Assignment or Step (0 for anything else).
  static uint64_t GenerationOf(const moe::v1::RouterMessage& msg);
  // Sends a Heartbeat every heartbeat_interval_ms_ until `stop` is set.
  void Heartbeats(grpc::ClientReaderWriter<moe::v1::WorkerMessage,
                                           moe::v1::RouterMessage>* stream);
  // --collective-host, or with "auto" the local address toward the router.
  absl::StatusOr<std::string> CollectiveHost() const;

  WorkerOptions options_;
  std::atomic<bool> stopping_{false};
  std::mutex ctx_mu_;
  grpc::ClientContext* active_ctx_ = nullptr;
  BlockingQueue<moe::v1::RouterMessage>* active_queue_ = nullptr;
  std::shared_ptr<moe::v1::WorkerControl::Stub> stub_;

  std::unique_ptr<StepExecutor> executor_;
  std::string loaded_key_;   // what the executor holds: model + range
  std::string result_rows_;  // kept between steps (Execute)
  // Live rebalancing: loads a PlacementUpdate's slots in the background and
  // answers PlacementLoaded; the model is the last Assignment's.
  void StagePlacement(const moe::v1::PlacementUpdate& update,
                      grpc::ClientReaderWriter<moe::v1::WorkerMessage,
                                               moe::v1::RouterMessage>* stream);
  moe::v1::ModelSpec assigned_model_;
  int32_t rank_ = 0;
  std::thread loader_;  // joined before the next one and at session end
  std::unique_ptr<Communicator> comm_;
  uint64_t generation_ = 0;
  // The newest generation the reader has seen: the executor skips
  // Assignments and Steps of older ones (a backlog queued while this worker
  // was stopped or busy).
  std::atomic<uint64_t> newest_generation_{0};
  // The executor's answers and the heartbeat thread share the stream.
  std::mutex write_mu_;
  std::condition_variable heartbeat_cv_;  // with write_mu_
  bool writes_closed_ = false;            // guarded by write_mu_
  std::atomic<int64_t> heartbeat_interval_ms_{500};
  std::string collective_host_;  // this session's
  // The reconnect path's warnings, repeated while refused or unreachable.
  RepeatedLine retry_log_{std::chrono::seconds(10)};
};

}  // namespace moe
