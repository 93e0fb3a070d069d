// A worker process's life: over its connection to the router
// (worker/router_connection.h), take assignments (load experts, join the
// collective group), run steps in order and answer, stage live-rebalance
// placements in the background.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "moe/v1/worker.pb.h"
#include "worker/join_stream.h"
#include "worker/placement_loader.h"
#include "worker/router_connection.h"
#include "worker/step_executor.h"
#include "worker/worker_metrics.h"

namespace moe {

struct WorkerOptions : RouterConnectionOptions {
  // Caps the Assignment's max_batch_tokens (0: take the router's): the
  // worker sizes its workspaces for, and accepts steps of, at most this many
  // rows; a bigger step is refused with RESOURCE_EXHAUSTED.
  int64_t max_batch_tokens = 0;
  WorkerMetrics* metrics = nullptr;  // may be null
  // Told whether the worker is in a ready collective group (health).
  std::function<void(bool ready)> on_ready;
};

// The handler of the router's messages. Its state is the executor
// thread's (Handle and SessionEnded never run at once), so it has no lock;
// the placement loader gets copies of what it reads.
class WorkerAgent final : public RouterMessageHandler {
 public:
  WorkerAgent(WorkerOptions options, std::unique_ptr<StepExecutor> executor);
  ~WorkerAgent() override;
  // Serves until Shutdown().
  void Run() { connection_.Run(); }
  // Callable from any thread: ends the session and Run(). A step (or group
  // assignment) being executed is finished and answered first; steps queued
  // behind it are not started. The worker then closes its stream, and the
  // router regroups without it.
  void Shutdown() { connection_.Shutdown(); }

  void Handle(const moe::v1::RouterMessage& msg, JoinStream& stream) override;
  void SessionEnded() override;

 private:
  void Assign(const moe::v1::Assignment& a, JoinStream& stream,
              moe::v1::Ready* ready);
  // Loads the Assignment's experts unless they are what is loaded already.
  absl::Status LoadExperts(const moe::v1::Assignment& a,
                           const ExpertShard& shard, int64_t max_tokens);
  // Joins the Assignment's collective group, in attempts retried with fresh
  // rendezvous keys while the generation is the newest.
  absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(
      const moe::v1::Assignment& a, JoinStream& stream);
  void RunStep(const moe::v1::Step& step, moe::v1::StepResult* result);
  void SetReady(bool ready);

  const WorkerOptions options_;
  std::unique_ptr<StepExecutor> executor_;
  std::string loaded_key_;   // what the executor holds (LoadKeyOf)
  std::string result_rows_;  // kept between steps (Handle)
  moe::v1::ModelSpec assigned_model_;
  int32_t rank_ = 0;
  // Live rebalancing: a PlacementUpdate's slots of assigned_model_, loaded
  // in the background; joined at session end.
  PlacementLoader loader_;
  std::unique_ptr<Communicator> comm_;
  uint64_t generation_ = 0;
  // Last: its threads call the members above until Run returns.
  RouterConnection connection_;
};

}  // namespace moe
