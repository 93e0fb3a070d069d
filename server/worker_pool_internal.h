// What the files of WorkerPool's implementation share: the record of a
// worker's connection and the reactor of a parked StoreGet.
//   worker_pool.cc            registration, generations, heartbeats, regroups
//   worker_pool_steps.cc      steps on the group (the StepChannel sends them)
//   worker_pool_placement.cc  the placement in force and rebalancing
//   worker_pool_store.cc      StoreSet and StoreGet over the rendezvous store
// Not for use outside server/worker_pool*.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/worker_admission.h"
#include "server/worker_pool.h"

namespace moe {

// One parked StoreGet: the call's reactor, deleted when the call is done.
class WorkerPool::StoreWait : public grpc::ServerUnaryReactor,
                              public StoreWaiter {
 public:
  StoreWait(RendezvousStore* store, moe::v1::StoreGetResponse* resp)
      : store_(store), resp_(resp) {}
  void OnCancel() override { store_->Cancel(this); }
  void OnDone() override { delete this; }
  void End(const absl::Status& status,
           std::vector<std::string> values) override;

 private:
  RendezvousStore* const store_;
  moe::v1::StoreGetResponse* const resp_;
};

// Rank `rank`'s expert slots of every layer of `placement` into `out` (an
// Assignment's or a PlacementUpdate's layer_slots).
void AddLayerSlots(
    const ExpertPlacement& placement, int rank,
    google::protobuf::RepeatedPtrField<moe::v1::LayerSlots>* out);

struct WorkerPool::Conn : StepRank {
  grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
      stream = nullptr;
  WorkerRegistration info;  // from its Register message
  int threads = 0;          // Register.threads, for the log
  int slot = -1;            // in members_
  // The pool's mu_ guards rank, assigned and ready_generation.
  int rank = -1;  // in the current generation; -1: not in it
  // Told the heartbeat interval in this generation's Assignment (and so
  // held to it).
  bool assigned = false;
  uint64_t ready_generation = 0;
  absl::Mutex write_mu;
  bool open ABSL_GUARDED_BY(write_mu) = true;
  // When the last message came (steady clock, ns); stalled: no message
  // for heartbeat_misses intervals (set under the pool's mu_).
  std::atomic<int64_t> last_seen{
      std::chrono::steady_clock::now().time_since_epoch().count()};
  std::atomic<bool> stalled{false};

  bool Write(const moe::v1::RouterMessage& m) override {
    absl::MutexLock lock(&write_mu);
    return open && stream->Write(m);
  }
  void Close() {
    absl::MutexLock lock(&write_mu);
    open = false;
  }
  std::string Name() const override {
    // "rank R (host pid N)", or "(host pid N)" outside the generation.
    return absl::StrCat(rank >= 0 ? absl::StrCat("rank ", rank, " ") : "", "(",
                        info.host, " pid ", info.pid, ")");
  }
};

}  // namespace moe
