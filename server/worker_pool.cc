#include "server/worker_pool.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/even_split.h"
#include "core/logging.h"
#include "core/net_address.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

// A fresh secret per rank and generation.
std::string NewToken() {
  static std::mutex mu;
  static std::random_device rd;
  std::lock_guard<std::mutex> lock(mu);
  std::string t(16, '\0');
  for (char& c : t) c = static_cast<char>(rd() & 0xff);
  return t;
}

grpc::Status GenerationMismatch(const char* what, uint64_t asked,
                                uint64_t now) {
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat(what, " for generation ", asked, " refused: generation ",
                   asked, asked < now ? " is over" : " has not started",
                   "; the store serves generation ", now));
}

// A worker on another host that advertises a loopback collective address
// would send the other workers to themselves: the group could never form.
grpc::Status CheckCollectiveHost(const moe::v1::Register& info,
                                 const std::string& peer) {
  if (!IsLoopbackHost(info.collective_host()) || IsLoopbackPeer(peer)) {
    return grpc::Status::OK;
  }
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("worker (", info.host(), " pid ", info.pid(),
                   ") refused: it connects from ", peer,
                   " but advertises the loopback collective address ",
                   info.collective_host(),
                   ", which the other workers cannot reach; start it "
                   "without --collective-host (the address of the "
                   "interface that reaches the router) or with "
                   "--collective-host set to an address the other workers "
                   "reach it on"));
}

}  // namespace

int KeyOwner(const std::string& key) {
  if (key == "nccl-unique-id") return 0;
  absl::string_view k = key;
  if (absl::StartsWith(k, "rank_")) k.remove_prefix(5);
  const size_t digits =
      std::find_if(k.begin(), k.end(),
                   [](char c) { return !absl::ascii_isdigit(c); }) -
      k.begin();
  if (digits == 0 || digits > 9) return -1;
  if (digits < k.size() && k[digits] != '/') return -1;
  int rank = -1;
  if (!absl::SimpleAtoi(k.substr(0, digits), &rank)) return -1;
  return rank;
}

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
  // No more answers will come: a worker was lost, the generation changed or
  // the router is shutting down.
  bool aborted = false;
  absl::Status status;  // first failure
  bool done() const { return aborted || remaining == 0; }
};

namespace {

// A worker's error as the client sees it: its code and message, with the
// rank that reported it.
absl::Status WorkerError(int rank, const moe::v1::StepResult& result) {
  const int code = result.error_code();
  const auto c =
      code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(
      c, absl::StrCat("worker rank ", rank, ": ", result.error_message()));
}

}  // namespace

namespace {
constexpr absl::string_view kPlacementChanged = "expert placement changed";
}  // namespace

bool IsPlacementChanged(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StartsWith(status.message(), kPlacementChanged);
}

WorkerPool::WorkerPool(WorkerPoolOptions options)
    : options_(std::move(options)),
      members_(options_.world_size),
      placement_(options_.placement) {
  retry_thread_ = std::thread([this] { RetryLoop(); });
}

WorkerPool::~WorkerPool() {
  Shutdown();
  if (retry_thread_.joinable()) retry_thread_.join();
}

void WorkerPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    FailPendingLocked(absl::UnavailableError("router shutting down"));
    EndWaitsLocked(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "router shutting down"));
    cv_.notify_all();
  }
  FinishWaits();
}

WorkerPool::State WorkerPool::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StateLocked();
}

WorkerPool::State WorkerPool::StateLocked() const {
  State s;
  s.world_size = options_.world_size;
  s.group_size = static_cast<int>(ranks_.size());
  for (const auto& c : members_) s.connected += c != nullptr;
  s.ready_workers = ready_count_;
  s.ready = ready_;
  s.generation = generation_;
  s.refusal = ready_ ? "" : refusal_;
  s.stalled = StalledLocked();
  return s;
}

grpc::Status WorkerPool::CheckDeviceLocked(
    const moe::v1::Register& info) const {
  if (info.device_identity().empty()) return grpc::Status::OK;
  for (const auto& c : members_) {
    if (c == nullptr || c->info.host() != info.host() ||
        c->info.device_identity() != info.device_identity() ||
        (info.shares_device() && c->info.shares_device())) {
      continue;
    }
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat(
            "worker (", info.host(), " pid ", info.pid(), ") refused: its ",
            info.device(), " is ", info.device_identity(), ", which worker ",
            c->Name(),
            " already uses; NCCL runs one rank "
            "per GPU: give each worker its own GPU, or start every worker "
            "that shares it with --collective gloo"));
  }
  return grpc::Status::OK;
}

void WorkerPool::SetStateCallback(std::function<void(const State&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  state_callback_ = std::move(callback);
}

void WorkerPool::NotifyLocked(std::vector<std::function<void()>>* notify) {
  if (!state_callback_) return;
  // The callback reads the state when it runs, under notify_mu_: two
  // notifications racing out of order still leave the latest state shown.
  notify->push_back([this, cb = state_callback_] {
    std::lock_guard<std::mutex> lock(notify_mu_);
    cb(state());
  });
}

void WorkerPool::FailPendingLocked(const absl::Status& status) {
  for (auto& [id, p] : pending_) {
    if (p->done()) continue;
    p->aborted = true;
    if (p->status.ok()) p->status = status;
  }
  cv_.notify_all();
}

void WorkerPool::StartGenerationLocked(Outbox* out) {
  std::vector<std::shared_ptr<Conn>> group;
  for (const auto& c : members_) {
    // A stalled worker could not join (it gets a new generation when it
    // answers again).
    if (c != nullptr && !c->stalled) group.push_back(c);
  }
  const int P = options_.world_size;
  const int W = static_cast<int>(group.size());
  if (W == 0) return;
  if (W < P) {
    // Fewer than configured: only once a full group has run and its last
    // loss is regroup_after old (then also at once when a worker returns).
    if (!formed_full_ || !lost_at_) return;
    const Clock::time_point at = *lost_at_ + options_.regroup_after;
    if (Clock::now() < at) {
      if (!regroup_pending_ || regroup_at_ < at) regroup_at_ = at;
      regroup_pending_ = true;
      cv_.notify_all();
      return;
    }
  }
  const uint64_t ended = generation_;
  ++generation_;
  ready_count_ = 0;
  store_.clear();
  EndWaitsLocked(GenerationMismatch("StoreGet", ended, generation_));
  regroup_pending_ = false;
  if (W == P) {
    formed_full_ = true;
    lost_at_.reset();
  }
  for (const auto& c : members_) {
    if (c == nullptr) continue;
    // Left out of this generation: no rank, no store token, no heartbeat
    // watch (it is already known to be stalled).
    c->rank = -1;
    c->store_token.clear();
  }
  ranks_ = std::move(group);
  FailPendingLocked(absl::UnavailableError(absl::StrCat(
      "worker group reconfigured (generation ", generation_, ")")));
  if (staging_.active && staging_.error.empty()) {
    staging_.error =
        absl::StrCat("worker group reconfigured (generation ", generation_,
                     ") while loading placement ", staging_.epoch);
  }
  // The placement is made for the configured P workers: a smaller group
  // (degraded, see regroup_after) splits the experts evenly instead, and
  // the placement is back in force when the group is whole again.
  const ExpertPlacement* placed = W == P ? placement_.get() : nullptr;
  const int64_t E = options_.num_experts;
  for (int r = 0; r < W; ++r) {
    ranks_[r]->rank = r;
    moe::v1::RouterMessage msg;
    auto* a = msg.mutable_assignment();
    a->set_generation(generation_);
    a->set_rank(r);
    a->set_world_size(W);
    a->set_expert_begin(SplitBegin(r, W, E));
    a->set_expert_end(SplitBegin(r + 1, W, E));
    a->set_placement_epoch(placement_epoch_);
    if (placed != nullptr) {
      a->set_redundant_experts(placed->redundant);
      for (const auto& [layer, lp] : placed->layers) {
        auto* slots = a->add_layer_slots();
        slots->set_layer(static_cast<int32_t>(layer));
        slots->mutable_experts()->Assign(lp.workers[r].begin(),
                                         lp.workers[r].end());
      }
    }
    *a->mutable_model() = options_.model;
    a->set_heartbeat_interval_ms(options_.heartbeat_interval.count());
    a->set_connect_timeout_ms(options_.connect_timeout.count());
    a->set_collective_timeout_ms(options_.collective_timeout.count());
    a->set_max_batch_tokens(options_.max_batch_tokens);
    ranks_[r]->store_token = NewToken();
    a->set_store_token(ranks_[r]->store_token);
    out->emplace_back(ranks_[r], std::move(msg));
  }
  if (W < P) {
    spdlog::warn(
        "worker group generation {}: {} ranks assigned, DEGRADED ({} of {} "
        "configured workers; experts re-split over {}); it grows back when "
        "workers return",
        generation_, W, W, P, W);
  } else {
    spdlog::info("worker group generation {}: {} ranks assigned", generation_,
                 W);
  }
}

void WorkerPool::LostLocked() {
  lost_at_ = Clock::now();
  if (!formed_full_) return;
  // The retry thread forms the smaller group when the time comes.
  regroup_pending_ = true;
  regroup_at_ = *lost_at_ + options_.regroup_after;
  cv_.notify_all();
}

void WorkerPool::Send(Outbox& out) {
  for (auto& [conn, msg] : out) conn->Write(msg);
}

grpc::Status WorkerPool::Join(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
        stream) {
  if (auto s = CheckWorkerCall(options_.auth, *ctx, "Join"); !s.ok()) return s;
  moe::v1::WorkerMessage msg;
  if (!stream->Read(&msg) || !msg.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of Join must be Register");
  }
  auto conn = std::make_shared<Conn>();
  conn->stream = stream;
  conn->info = msg.register_();
  std::vector<std::function<void()>> notify;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    Outbox out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "router shutting down");
      }
      grpc::Status dup = CheckCollectiveHost(conn->info, ctx->peer());
      if (dup.ok()) dup = CheckDeviceLocked(conn->info);
      if (!dup.ok()) {
        // Refused before it takes a rank: the group is not re-formed.
        refusal_ = dup.error_message();
        spdlog::error("{}", refusal_);
        return dup;
      }
      for (int i = 0; i < options_.world_size; ++i) {
        if (members_[i] == nullptr) {
          conn->slot = i;
          members_[i] = conn;
          break;
        }
      }
      if (conn->slot < 0) {
        return grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("all ", options_.world_size,
                         " worker ranks are taken; retry to stand by"));
      }
      int connected = 0;
      for (const auto& c : members_) connected += c != nullptr;
      spdlog::info(
          "worker {} registered from {} ({} of {} workers connected; {} "
          "threads, {})",
          conn->Name(), ctx->peer(), connected, options_.world_size,
          conn->info.threads(), conn->info.device());
      StartGenerationLocked(&out);
      NotifyLocked(&notify);
    }
    // The ended generation's waits first: a send can block on a slow
    // worker.
    FinishWaits();
    Send(out);
  }
  for (auto& n : notify) n();
  while (stream->Read(&msg)) {
    Seen(conn);
    if (msg.has_ready()) {
      OnReady(conn, msg.ready());
    } else if (msg.has_result()) {
      OnResult(conn, *msg.mutable_result());
    } else if (msg.has_placement_loaded()) {
      OnPlacementLoaded(conn, msg.placement_loaded());
    }
  }
  Remove(conn);
  return grpc::Status::OK;
}

void WorkerPool::Remove(const std::shared_ptr<Conn>& conn) {
  conn->Close();
  std::vector<std::function<void()>> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn->slot >= 0 && members_[conn->slot] == conn) {
      members_[conn->slot] = nullptr;
      spdlog::warn("worker {} disconnected", conn->Name());
      const bool in_group = conn->rank >= 0 &&
                            conn->rank < static_cast<int>(ranks_.size()) &&
                            ranks_[conn->rank] == conn;
      if (in_group) {
        if (conn->ready_generation == generation_ && ready_count_ > 0) {
          --ready_count_;
        }
        FailPendingLocked(absl::UnavailableError(
            absl::StrCat("worker ", conn->Name(), " disconnected")));
        // The generation's rendezvous cannot complete without it.
        EndWaitsLocked(
            grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         absl::StrCat("worker ", conn->Name(),
                                      " left generation ", generation_)));
        conn->store_token.clear();
        ready_ = false;
        LostLocked();
      }
      NotifyLocked(&notify);
    }
  }
  FinishWaits();
  for (auto& n : notify) n();
}

void WorkerPool::Seen(const std::shared_ptr<Conn>& conn) {
  conn->last_seen = Clock::now().time_since_epoch().count();
  if (!conn->stalled) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!conn->stalled) return;
    conn->stalled = false;
    spdlog::warn("worker {} answers again; rebuilding the worker group",
                 conn->Name());
  }
  Regroup(/*delayed=*/false);
}

std::string WorkerPool::StalledLocked() const {
  std::string out;
  for (const auto& c : members_) {
    if (c != nullptr && c->stalled) {
      absl::StrAppend(&out, "; worker ", c->Name(),
                      " not answering (no heartbeat for ",
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          Clock::now().time_since_epoch() -
                          Clock::duration(c->last_seen.load()))
                          .count(),
                      " ms)");
    }
  }
  return out;
}

void WorkerPool::CheckStallsLocked(Clock::time_point now,
                                   std::vector<std::function<void()>>* notify) {
  const auto limit = options_.heartbeat_interval * options_.heartbeat_misses;
  for (const auto& c : ranks_) {
    // Only a rank that was told the interval (in an Assignment) is held
    // to it.
    if (c == nullptr || c->stalled || c->store_token.empty()) continue;
    const auto silent =
        now.time_since_epoch() - Clock::duration(c->last_seen.load());
    if (silent <= limit) continue;
    c->stalled = true;
    const absl::Status status = absl::UnavailableError(absl::StrCat(
        "worker ", c->Name(), " stopped answering: no heartbeat for ",
        std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
        " ms (", options_.heartbeat_misses, " x ",
        options_.heartbeat_interval.count(), " ms)"));
    spdlog::error("{}", status.message());
    // The silent rank is the cause: its peers' errors (a collective that
    // timed out waiting for it) are not.
    for (auto& [id, p] : pending_) {
      if (p->done() && !p->aborted) continue;
      p->aborted = true;
      p->status = status;
    }
    cv_.notify_all();
    EndWaitsLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                std::string(status.message())));
    ready_ = false;
    LostLocked();
    NotifyLocked(notify);
  }
}

void WorkerPool::OnReady(const std::shared_ptr<Conn>& conn,
                         const moe::v1::Ready& ready) {
  std::vector<std::function<void()>> notify;
  bool retry = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready.generation() != generation_ || conn->rank < 0 ||
        ranks_[conn->rank] != conn) {
      return;
    }
    if (!ready.error().empty()) {
      spdlog::warn("worker {} failed generation {}: {}", conn->Name(),
                   ready.generation(), ready.error());
      retry = true;
    } else if (conn->ready_generation != generation_) {
      conn->ready_generation = generation_;
      if (++ready_count_ == static_cast<int>(ranks_.size())) {
        spdlog::info("worker group generation {} ready ({} of {} workers)",
                     generation_, ranks_.size(), options_.world_size);
        ready_ = true;
        refusal_.clear();
        cv_.notify_all();  // steps held while the group re-formed
      }
      NotifyLocked(&notify);
    }
  }
  for (auto& n : notify) n();
  if (retry) Regroup(/*delayed=*/true);
}

void WorkerPool::OnResult(const std::shared_ptr<Conn>& conn,
                          moe::v1::StepResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(result.step_id());
  if (it == pending_.end()) return;  // the step already failed or finished
  Pending& p = *it->second;
  const int r = conn->rank;
  if (result.generation() != p.generation || r < 0 || p.have[r]) return;
  p.have[r] = true;
  --p.remaining;
  if (result.error_code() != 0) {
    spdlog::warn(
        "worker {} failed step {}{}: {}", conn->Name(), result.step_id(),
        result.collectives_broken() ? " (collective group broken)" : "",
        result.error_message());
    ++p.failed;
    p.broken = p.broken || result.collectives_broken();
    if (p.status.ok()) p.status = WorkerError(r, result);
  } else {
    p.results[r].Swap(&result);
  }
  cv_.notify_all();
}

std::string WorkerPool::NotReadyLocked() const {
  const State st = StateLocked();
  return absl::StrCat("worker group not ready: ", st.connected, " of ",
                      st.world_size, " workers connected, ", st.ready_workers,
                      " ready", StalledLocked());
}

absl::StatusOr<int> WorkerPool::AwaitGroup(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!ready_ && !shutdown_ && options_.hold_while_regrouping.count() > 0) {
    // Held, not failed: a regroup takes about a rendezvous, and a client
    // would only retry. Bounded by the flag and `deadline`; the
    // requests behind this step wait in the batcher's bounded queue.
    const Clock::time_point until =
        std::min(deadline, Clock::now() + options_.hold_while_regrouping);
    cv_.wait_until(lock, until, [&] { return ready_ || shutdown_; });
  }
  if (shutdown_) return absl::UnavailableError("router shutting down");
  if (!ready_) return absl::UnavailableError(NotReadyLocked());
  return static_cast<int>(ranks_.size());
}

WorkerPool::PlacementInForce WorkerPool::placement() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A degraded group runs without it (StartGenerationLocked).
  const bool whole = static_cast<int>(ranks_.size()) == options_.world_size;
  return {whole ? placement_ : nullptr, placement_epoch_};
}

void WorkerPool::OnPlacementLoaded(const std::shared_ptr<Conn>& conn,
                                   const moe::v1::PlacementLoaded& loaded) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!staging_.active || loaded.epoch() != staging_.epoch ||
      loaded.generation() != staging_.generation || conn->rank < 0 ||
      ranks_[conn->rank] != conn) {
    return;
  }
  if (!loaded.error().empty()) {
    if (staging_.error.empty()) {
      staging_.error =
          absl::StrCat("worker rank ", conn->rank, " could not load placement ",
                       loaded.epoch(), ": ", loaded.error());
    }
  } else if (!staging_.loaded[conn->rank]) {
    staging_.loaded[conn->rank] = true;
    --staging_.remaining;
  }
  cv_.notify_all();
}

absl::Status WorkerPool::Rebalance(std::shared_ptr<const ExpertPlacement> next,
                                   Clock::time_point deadline,
                                   uint64_t* epoch_out) {
  const int P = options_.world_size;
  for (const auto& [layer, lp] : next->layers) {
    if (lp.world() != P) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement of layer ", layer, " is for ", lp.world(),
                       " workers, the group has ", P));
    }
  }
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    Outbox out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ready_) {
        return absl::UnavailableError(
            "worker group not ready: cannot rebalance now");
      }
      if (static_cast<int>(ranks_.size()) != P) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker group degraded to ", ranks_.size(), " of ", P,
            " workers: the placement is not in force; rebalance once the "
            "group is whole"));
      }
      if (staging_.active) {
        return absl::FailedPreconditionError(
            absl::StrCat("placement ", staging_.epoch, " is still loading"));
      }
      epoch = ++next_epoch_;
      staging_ = Staging();
      staging_.active = true;
      staging_.epoch = epoch;
      staging_.generation = generation_;
      staging_.loaded.assign(P, false);
      staging_.remaining = P;
      for (int r = 0; r < P; ++r) {
        moe::v1::RouterMessage msg;
        auto* u = msg.mutable_placement();
        u->set_generation(generation_);
        u->set_epoch(epoch);
        u->set_redundant_experts(next->redundant);
        for (const auto& [layer, lp] : next->layers) {
          auto* slots = u->add_layer_slots();
          slots->set_layer(static_cast<int32_t>(layer));
          slots->mutable_experts()->Assign(lp.workers[r].begin(),
                                           lp.workers[r].end());
        }
        out.emplace_back(ranks_[r], std::move(msg));
      }
    }
    Send(out);
  }
  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [&] {
      return shutdown_ || staging_.remaining == 0 || !staging_.error.empty();
    });
    if (shutdown_) {
      status = absl::UnavailableError("router shutting down");
    } else if (!staging_.error.empty()) {
      status = absl::UnavailableError(staging_.error);
    } else if (staging_.remaining > 0) {
      status = absl::DeadlineExceededError(absl::StrCat(
          staging_.remaining, " worker(s) still loading placement ", epoch));
    }
    if (!status.ok()) {
      staging_.active = false;
      return status;
    }
  }
  // Switch between two sends: every step sent from here on names `epoch`.
  std::lock_guard<std::mutex> send_lock(send_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (staging_.generation != generation_ || !staging_.error.empty()) {
    staging_.active = false;
    return absl::UnavailableError(absl::StrCat(
        "worker group reconfigured while loading placement ", epoch));
  }
  placement_ = std::move(next);
  placement_epoch_ = epoch;
  staging_.active = false;
  if (epoch_out != nullptr) *epoch_out = epoch;
  spdlog::info("expert placement {} in force", epoch);
  return absl::OkStatus();
}

absl::Status WorkerPool::RunStep(std::vector<moe::v1::Step>& steps,
                                 Clock::time_point deadline,
                                 const std::function<void()>& overlap,
                                 std::vector<moe::v1::StepResult>* results) {
  const int P = static_cast<int>(steps.size());
  auto pending = std::make_shared<Pending>();
  uint64_t id;
  {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    std::vector<std::shared_ptr<Conn>> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ready_) return absl::UnavailableError(NotReadyLocked());
      if (P != static_cast<int>(ranks_.size())) {
        return absl::UnavailableError(absl::StrCat(
            "worker group re-formed with ", ranks_.size(),
            " workers while a step for ", P, " was planned; retry"));
      }
      if (!steps.empty() && steps[0].placement_epoch() != placement_epoch_) {
        return absl::AbortedError(absl::StrCat(
            kPlacementChanged, ": step planned for ",
            steps[0].placement_epoch(), ", in force ", placement_epoch_));
      }
      id = next_step_++;
      pending->generation = generation_;
      pending->results.resize(P);
      pending->have.assign(P, false);
      pending->remaining = P;
      pending_[id] = pending;
      conns = ranks_;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    for (int r = 0; r < P; ++r) {
      moe::v1::RouterMessage msg;
      steps[r].set_generation(pending->generation);
      steps[r].set_step_id(id);
      steps[r].set_timeout_ms(std::max<int64_t>(left.count(), 1));
      msg.mutable_step()->Swap(&steps[r]);
      const bool written = conns[r]->Write(msg);
      // Write has serialized it: the step's buffers go back to the caller,
      // to be overwritten by the next step instead of allocated anew.
      msg.mutable_step()->Swap(&steps[r]);
      if (!written) {
        std::lock_guard<std::mutex> lock(mu_);
        pending->aborted = true;
        if (pending->status.ok()) {
          pending->status = absl::UnavailableError(absl::StrCat(
              "lost worker ", conns[r]->Name(), " sending step ", id));
        }
        break;
      }
    }
  }
  if (overlap) overlap();
  absl::Status status;
  bool regroup = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A worker's collectives time out at the deadline and report it; the
    // grace covers the report's trip back.
    const bool finished =
        cv_.wait_until(lock, deadline + std::chrono::seconds(1),
                       [&] { return pending->done(); });
    if (!finished) {
      std::vector<int> missing;
      for (int r = 0; r < P; ++r) {
        if (!pending->have[r]) missing.push_back(r);
      }
      const absl::Status stalled = absl::UnavailableError(
          absl::StrCat("step ", id, " timed out waiting for worker ranks [",
                       absl::StrJoin(missing, ", "), "]"));
      // The ranks that did not answer are the cause, whatever their
      // peers reported first (a collective timed out waiting for them).
      if (!pending->status.ok()) {
        spdlog::warn("{} after: {}", stalled.message(),
                     pending->status.message());
      }
      pending->status = stalled;
    }
    status = pending->status;
    pending_.erase(id);
    // The group stays only when every rank answered and every one refused
    // the step before its first collective (a deterministic rejection, such
    // as a step over the workers' limit): then no communicator moved, and
    // the next step runs at once. Anything else (a rank broken in or after
    // a collective, a rank that did not answer, a rank that went on into
    // the collectives while another refused) may leave ranks mid-collective
    // or out of step: rebuild the group, unless a disconnect or a new
    // generation already took care of it.
    const bool intact = finished && !pending->aborted &&
                        pending->remaining == 0 && pending->failed == P &&
                        !pending->broken;
    regroup =
        !status.ok() && !intact && pending->generation == generation_ && ready_;
    if (regroup) {
      spdlog::warn("step {} failed ({}); rebuilding the worker group", id,
                   status.ToString());
    }
  }
  if (regroup) Regroup(/*delayed=*/false);
  if (!status.ok()) return status;
  results->swap(pending->results);
  return absl::OkStatus();
}

void WorkerPool::Regroup(bool delayed) {
  if (delayed) {
    std::lock_guard<std::mutex> lock(mu_);
    regroup_pending_ = true;
    regroup_at_ = Clock::now() + options_.retry_delay;
    cv_.notify_all();
    return;
  }
  std::vector<std::function<void()>> notify;
  std::lock_guard<std::mutex> send_lock(send_mu_);
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    ready_ = false;
    StartGenerationLocked(&out);
    NotifyLocked(&notify);
  }
  FinishWaits();  // before a send that can block on a slow worker
  Send(out);
  for (auto& n : notify) n();
}

void WorkerPool::RetryLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutdown_) {
    const Clock::time_point now = Clock::now();
    // Parked StoreGets whose timeout passed.
    WakeWaitsLocked(now);
    if (!ended_waits_.empty()) {
      lock.unlock();
      FinishWaits();
      lock.lock();
      continue;
    }
    std::vector<std::function<void()>> notify;
    CheckStallsLocked(now, &notify);
    if (!notify.empty() || !ended_waits_.empty()) {
      lock.unlock();
      FinishWaits();
      for (auto& n : notify) n();
      lock.lock();
      continue;
    }
    if (regroup_pending_ && now >= regroup_at_) {
      regroup_pending_ = false;
      lock.unlock();
      Regroup(/*delayed=*/false);
      lock.lock();
      continue;
    }
    // The watchdog looks every heartbeat interval.
    std::optional<Clock::time_point> wake = now + options_.heartbeat_interval;
    if (regroup_pending_) wake = std::min(*wake, regroup_at_);
    for (const StoreWait* w : waits_) {
      if (!wake || w->deadline < *wake) wake = w->deadline;
    }
    cv_.wait_until(lock, *wake);
  }
}

void WorkerPool::EndWaitsLocked(const grpc::Status& status) {
  for (StoreWait* w : waits_) ended_waits_.emplace_back(w, status);
  waits_.clear();
}

void WorkerPool::WakeWaitsLocked(Clock::time_point now) {
  std::erase_if(waits_, [&](StoreWait* w) {
    bool all_set = true;
    for (const auto& k : w->req->keys()) {
      if (store_.count(k) == 0) {
        all_set = false;
        break;
      }
    }
    if (all_set) {
      for (const auto& k : w->req->keys()) w->resp->add_values(store_[k]);
      ended_waits_.emplace_back(w, grpc::Status::OK);
      return true;
    }
    if (now >= w->deadline) {
      ended_waits_.emplace_back(
          w, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("rendezvous keys of generation ",
                                       generation_, " not all set in time")));
      return true;
    }
    return false;
  });
}

void WorkerPool::FinishWaits() {
  std::vector<std::pair<StoreWait*, grpc::Status>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended.swap(ended_waits_);
  }
  for (auto& [w, status] : ended) w->Finish(status);
}

void WorkerPool::CancelWait(StoreWait* wait) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(waits_.begin(), waits_.end(), wait);
    if (it == waits_.end()) return;  // already ended
    waits_.erase(it);
    ended_waits_.emplace_back(wait, grpc::Status(grpc::StatusCode::CANCELLED,
                                                 "store wait cancelled"));
  }
  FinishWaits();
}

size_t WorkerPool::store_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_.size();
}

int WorkerPool::RankOfStoreTokenLocked(const std::string& token) const {
  int rank = -1;
  for (const auto& c : ranks_) {
    // Every rank is compared, in constant time: the token is a secret.
    if (c != nullptr && !c->store_token.empty() &&
        c->store_token.size() == token.size() &&
        CRYPTO_memcmp(c->store_token.data(), token.data(), token.size()) == 0) {
      rank = c->rank;
    }
  }
  return rank;
}

grpc::ServerUnaryReactor* WorkerPool::StoreSet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreSetRequest* req,
    moe::v1::StoreSetResponse*) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreSet")) return r;
  auto* reactor = ctx->DefaultReactor();
  grpc::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int rank = RankOfStoreTokenLocked(req->store_token());
    const int owner = KeyOwner(req->key());
    if (req->generation() != generation_) {
      status = GenerationMismatch("StoreSet", req->generation(), generation_);
    } else if (rank < 0) {
      status = grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("StoreSet of '", absl::CHexEscape(req->key()),
                       "': the store token is not one of generation ",
                       generation_, "'s ranks"));
    } else if (owner != rank) {
      status = grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("rank ", rank, " may not set '",
                       absl::CHexEscape(req->key()), "': ",
                       owner < 0 ? "a key of no rank"
                                 : absl::StrCat("rank ", owner, "'s key")));
    } else {
      store_[req->key()] = req->value();
      WakeWaitsLocked(Clock::now());
    }
    if (!status.ok()) {
      spdlog::warn("refused: {}", status.error_message());
    }
  }
  FinishWaits();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerPool::StoreGet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreGetRequest* req,
    moe::v1::StoreGetResponse* resp) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreGet")) return r;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(
                         req->timeout_ms(), 0, int64_t{24} * 3600 * 1000));
  grpc::Status refused;
  StoreWait* wait = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int rank = RankOfStoreTokenLocked(req->store_token());
    int parked = 0;
    for (const StoreWait* w : waits_) parked += w->rank == rank;
    if (shutdown_) {
      refused =
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "router shutting down");
    } else if (req->generation() != generation_) {
      refused = GenerationMismatch("StoreGet", req->generation(), generation_);
    } else if (rank < 0) {
      refused = grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                             absl::StrCat("StoreGet: the store token is not "
                                          "one of generation ",
                                          generation_, "'s ranks"));
    } else if (parked >= options_.max_store_waits_per_rank) {
      refused = grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("rank ", rank, " already has ", parked,
                       " StoreGet calls waiting, the most per rank"));
    } else {
      wait = new StoreWait(this, req, resp, rank, deadline);
      waits_.push_back(wait);
      // Keys already set, or a zero timeout: answered at once.
      WakeWaitsLocked(Clock::now());
      cv_.notify_all();  // the retry thread keeps the timeouts
    }
  }
  if (wait == nullptr) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(refused);
    return reactor;
  }
  FinishWaits();
  return wait;
}

}  // namespace moe
