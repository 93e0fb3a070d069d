// What the files of WorkerPool's implementation share: the record of a
// worker's connection, of a step in flight and of a parked rendezvous wait.
//   worker_pool.cc            membership, generations, heartbeats, regroups
//   worker_pool_steps.cc      steps on the group and their results
//   worker_pool_placement.cc  redundant-expert placements and rebalancing
//   worker_pool_store.cc      the collectives' rendezvous store
// Not for use outside server/worker_pool*.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/worker_pool.h"

namespace moe {
namespace worker_pool_internal {

using Clock = std::chrono::steady_clock;

// A fresh secret per rank and generation.
std::string NewToken();
// FAILED_PRECONDITION for a store call of another generation than `now`.
grpc::Status GenerationMismatch(const char* what, uint64_t asked, uint64_t now);

}  // namespace worker_pool_internal

using worker_pool_internal::Clock;

// One parked StoreGet: the call's reactor, deleted when the call is done.
class WorkerPool::StoreWait : public grpc::ServerUnaryReactor {
 public:
  StoreWait(WorkerPool* pool, const moe::v1::StoreGetRequest* req,
            moe::v1::StoreGetResponse* resp, int rank,
            Clock::time_point deadline)
      : pool(pool), req(req), resp(resp), rank(rank), deadline(deadline) {}
  void OnCancel() override { pool->CancelWait(this); }
  void OnDone() override { delete this; }

  WorkerPool* const pool;
  const moe::v1::StoreGetRequest* const req;
  moe::v1::StoreGetResponse* const resp;
  const int rank;
  const Clock::time_point deadline;
};

struct WorkerPool::Conn {
  grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
      stream = nullptr;
  moe::v1::Register info;
  int slot = -1;  // in members_
  int rank = -1;  // in the current generation (under mu_); -1: not in it
  std::string store_token;        // of the current generation, under mu_
  uint64_t ready_generation = 0;  // guarded by the pool's mu_
  std::mutex write_mu;
  bool open = true;  // guarded by write_mu
  // When the last message came (steady clock, ns); stalled: no message
  // for heartbeat_misses intervals (set under the pool's mu_).
  std::atomic<int64_t> last_seen{Clock::now().time_since_epoch().count()};
  std::atomic<bool> stalled{false};
  // The generation and placement epoch of the last Step written (under the
  // pool's send_mu_): a rank with no rows in a direct step still gets it
  // when the epoch moved since, so that it switches placements with the
  // steps (a worker keeps one staged placement, and a newer one replaces
  // it).
  uint64_t step_generation = 0, step_epoch = 0;

  bool Write(const moe::v1::RouterMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu);
    return open && stream->Write(m);
  }
  void Close() {
    std::lock_guard<std::mutex> lock(write_mu);
    open = false;
  }
  std::string Name() const {
    // "rank R (host pid N)", or "(host pid N)" outside the generation.
    return absl::StrCat(rank >= 0 ? absl::StrCat("rank ", rank, " ") : "", "(",
                        info.host(), " pid ", info.pid(), ")");
  }
};

struct WorkerPool::Pending {
  uint64_t generation = 0;
  std::vector<moe::v1::StepResult> results;
  std::vector<bool> have;  // rank answered (a result or an error)
  int remaining = 0;       // ranks yet to answer
  int failed = 0;          // ranks that answered with an error
  bool broken = false;     // some rank's collective group is broken
  bool direct = false;     // every rank's step is direct: no collective
  // No more answers will come: a worker was lost, the generation changed or
  // the router is shutting down.
  bool aborted = false;
  absl::Status status;  // first failure
  bool done() const { return aborted || remaining == 0; }
};

}  // namespace moe
