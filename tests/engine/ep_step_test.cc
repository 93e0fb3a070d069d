// The expert-parallel step on its own: the plan's checks, the workspace
// bound against every way a batch can be split into requests, and the step
// run as two ranks over a real Gloo group in one process, directly and
// staged through host buffers (the path CUDA workers take under
// --collective gloo), each bit-identical to the single-process engine.
#include "engine/ep_step.h"

#include <functional>
#include <thread>
#include <tuple>

#include "comm/gloo_communicator.h"
#include "comm/loopback_communicator.h"
#include "core/dtype.h"
#include "core/even_split.h"
#include "core/fp8_rows.h"
#include "engine/cpu_backend.h"
#include "engine/direct_plan.h"
#include "engine/host_queue.h"
#include "engine/local_moe.h"
#include "engine/placement.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

MoeLayerConfig Base() {
  MoeLayerConfig c;
  c.hidden = 24;
  c.inter = 12;
  c.num_experts = 6;
  c.top_k = 2;
  return c;
}

// Every composition of `tokens` into segment lengths (ordered, >= 1 each).
void ForEachSplit(int64_t tokens,
                  const std::function<void(const std::vector<int64_t>&)>& f,
                  std::vector<int64_t>* prefix) {
  if (tokens == 0) {
    f(*prefix);
    return;
  }
  for (int64_t first = 1; first <= tokens; ++first) {
    prefix->push_back(first);
    ForEachSplit(tokens - first, f, prefix);
    prefix->pop_back();
  }
}

TEST(StepBounds, TokenChoiceIsKRowsPerToken) {
  MoeLayerConfig c = Base();
  const EpBounds b = StepBounds(c, 37, 5);
  EXPECT_EQ(b.tokens, 37);
  EXPECT_EQ(b.slots, 2);
  EXPECT_EQ(b.rows, 74);
  c.capacity_factor = 0.5;  // capacity only drops slots
  EXPECT_EQ(StepBounds(c, 37, 5).rows, 74);
}

TEST(StepBounds, ExpertChoiceHoldsForEverySegmentLayout) {
  for (double cf : {0.0, 0.3, 1.0, 2.5}) {
    for (int64_t E : {1, 3, 8}) {
      MoeLayerConfig c = Base();
      c.num_experts = E;
      c.top_k = std::min<int64_t>(2, E);
      c.routing = RoutingMode::kExpertChoice;
      c.capacity_factor = cf;
      for (int64_t T = 1; T <= 9; ++T) {
        std::vector<int64_t> prefix;
        ForEachSplit(
            T,
            [&](const std::vector<int64_t>& split) {
              int64_t rows = 0;
              for (int64_t n : split) rows += E * ExpertChoiceCapacity(c, n);
              const int64_t segs = static_cast<int64_t>(split.size());
              EXPECT_LE(rows, StepBounds(c, T, segs).rows)
                  << "cf " << cf << " E " << E << " T " << T << " segments "
                  << segs;
              // The bound a worker sizes for: any number of requests.
              EXPECT_LE(rows, StepBounds(c, T, T).rows);
            },
            &prefix);
      }
    }
  }
}

TEST(StepBounds, OldBoundWasTooSmallForManySmallRequests) {
  // Nine one-token requests under expert choice: every expert takes every
  // token, E rows per token, far above k rows per token plus E.
  MoeLayerConfig c = Base();
  c.routing = RoutingMode::kExpertChoice;
  const int64_t T = 9, E = c.num_experts;
  EXPECT_EQ(StepBounds(c, T, T).rows, T * E);
  EXPECT_GT(T * E, T * c.top_k + E);
}

EpStepInput OneRankInput(const std::vector<float>& x, int64_t n,
                         const std::vector<int32_t>& ids,
                         const std::vector<float>& w,
                         const std::vector<int64_t>& counts, int64_t slots) {
  EpStepInput in;
  in.tokens = n;
  in.rows = x.data();
  in.slots = slots;
  in.expert_ids = ids;
  in.weights = w;
  in.counts = counts;
  return in;
}

TEST(PlanEpStep, RefusesAPlanThatDisagreesWithTheRows) {
  const std::vector<float> x(2 * 4, 1.0f), w(4, 0.5f);
  std::vector<int32_t> ids = {0, 1, 1, 2};
  std::vector<int64_t> counts = {1, 2, 1};  // world 1, E = 3
  EpPlan p;
  ASSERT_TRUE(
      PlanEpStep(OneRankInput(x, 2, ids, w, counts, 2), 0, 1, 3, 8, true, &p)
          .ok());
  EXPECT_EQ(p.sent, 2);  // each token once
  EXPECT_EQ(p.received, 4);
  EXPECT_EQ(p.expert_offsets, (std::vector<int64_t>{0, 1, 3, 4}));

  counts = {2, 1, 1};  // says expert 0 gets two rows; the slots hold one
  absl::Status s =
      PlanEpStep(OneRankInput(x, 2, ids, w, counts, 2), 0, 1, 3, 8, true, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert 0"), std::string::npos) << s;

  counts = {1, 2, 1};
  ids[3] = 3;  // no such expert
  s = PlanEpStep(OneRankInput(x, 2, ids, w, counts, 2), 0, 1, 3, 8, true, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);

  ids[3] = 2;
  s = PlanEpStep(OneRankInput(x, 2, ids, w, counts, 2), 0, 1, 3, 1, true, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "max_count 1";

  const std::vector<float> short_w(3, 0.5f);
  s = PlanEpStep(OneRankInput(x, 2, ids, short_w, counts, 2), 0, 1, 3, 8, true,
                 &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoopbackCommunicator, MovesNothingInPlaceAndCopiesOtherwise) {
  auto comm = CreateLoopbackCommunicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> a = {1, 2, 3}, b(3, 0);
  const int64_t three[] = {3}, two[] = {2};
  ASSERT_TRUE(comm->AllToAllV(a.data(), three, b.data(), three,
                              ElementType::kF32, std::chrono::seconds(1))
                  .ok());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(comm->AllToAllV(a.data(), three, a.data(), three,
                              ElementType::kF32, std::chrono::seconds(1))
                  .ok());
  EXPECT_EQ(comm->AllToAllV(a.data(), three, b.data(), two, ElementType::kF32,
                            std::chrono::seconds(1))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Rank 1 of 3, as a direct step's communicator: what the rank sends itself
// is copied, anything to or from another rank is refused.
TEST(LoopbackCommunicator, AsOneRankOfAGroupMovesNothingAcross) {
  auto comm = CreateLoopbackCommunicator(1, 3);
  EXPECT_EQ(comm->rank(), 1);
  EXPECT_EQ(comm->size(), 3);
  std::vector<float> a = {1, 2}, b(2, 0);
  const int64_t self[] = {0, 2, 0}, across[] = {1, 1, 0};
  ASSERT_TRUE(comm->AllToAllV(a.data(), self, b.data(), self, ElementType::kF32,
                              std::chrono::seconds(1))
                  .ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(comm->AllToAllV(a.data(), across, b.data(), self, ElementType::kF32,
                            std::chrono::seconds(1))
                .code(),
            absl::StatusCode::kInternal);
  const int64_t one[] = {2};
  EXPECT_EQ(comm->AllToAllV(a.data(), one, b.data(), one, ElementType::kF32,
                            std::chrono::seconds(1))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The CPU backend posing as a device: its rows "live elsewhere", so the step
// stages them through host buffers around a host communicator, the path a
// CUDA worker takes under --collective gloo.
class StagedCpuBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  bool device_memory() const override { return true; }
  absl::Status ReserveStaging() override {
    const int64_t bytes = int64_t{1} << 22;  // every case here fits
    stage_send_.resize(bytes);
    stage_recv_.resize(bytes);
    SetBuffer(EpBuffer::kStageSend, stage_send_.data());
    SetBuffer(EpBuffer::kStageRecv, stage_recv_.data());
    ++staged_;
    return absl::OkStatus();
  }
  int staged() const { return staged_; }

 private:
  std::vector<char> stage_send_, stage_recv_;
  int staged_ = 0;
};

// Rank r of `world`'s backend (posing as a device when `staged`) and its
// shard of the experts: an even range, or its slots of `placement`.
std::unique_ptr<CpuBackend> RankBackend(bool staged, int threads) {
  if (staged) return std::make_unique<StagedCpuBackend>(threads);
  return std::make_unique<CpuBackend>(threads);
}
LoadOptions ShardOptions(const MoeLayerConfig& c, int r, int world,
                         const LayerPlacement* placement) {
  LoadOptions opts;
  opts.load_gate = false;
  opts.load_shared = false;
  opts.expert_begin = SplitBegin(r, world, c.num_experts);
  opts.expert_end = SplitBegin(r + 1, world, c.num_experts);
  if (placement != nullptr) {
    opts.layer_experts[0] = placement->workers[r];
    opts.expert_begin = opts.expert_end = 0;
  }
  return opts;
}

// Runs the case's step as `world` ranks over Gloo in this process; y [n, H].
// With `placement`, the ranks hold its slots (redundant experts) and the
// plan picks replicas.
std::vector<float> RunRanks(const testing::GoldenCase& g,
                            const Routing& routing, bool staged, int world,
                            const LayerPlacement* placement = nullptr,
                            bool peers_ids = true,
                            DispatchDType dispatch = DispatchDType::kRowType,
                            int backend_threads = 1) {
  const MoeLayerConfig& c = g.config;
  const int64_t n = g.tokens, H = c.hidden, S = routing.slots;
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  ReplicaMap replicas;
  if (placement != nullptr)
    replicas = MakeReplicaMap(*placement, c.num_experts);
  PlanDispatch(routing, n, world, c.num_experts, &ids, &counts,
               placement != nullptr ? &replicas : nullptr);
  auto source = testing::MakeGoldenSource(g);
  gloo::rendezvous::HashStore store;
  std::vector<float> y(n * H, -1.0f);
  std::vector<absl::Status> status(world);
  std::vector<int> staged_calls(world, 0);
  auto rank = [&](int r) {
    std::unique_ptr<CpuBackend> backend = RankBackend(staged, backend_threads);
    status[r] = backend->Load(*source, ShardOptions(c, r, world, placement), n);
    if (!status[r].ok()) return;
    auto comm = CreateGlooCommunicator(r, world, "127.0.0.1", store,
                                       std::chrono::seconds(30));
    if (!comm.ok()) {
      status[r] = comm.status();
      return;
    }
    const int64_t b = SplitBegin(r, world, n), e = SplitBegin(r + 1, world, n);
    EpStepInput in;
    in.tokens = e - b;
    in.rows = g.x.data() + b * H;
    in.slots = S;
    in.expert_ids = absl::MakeConstSpan(ids).subspan(b * S, (e - b) * S);
    in.weights =
        absl::MakeConstSpan(routing.weight).subspan(b * S, (e - b) * S);
    in.counts = counts;
    if (peers_ids) in.all_expert_ids = ids;
    if (placement != nullptr) in.experts = replicas.physical;
    in.dispatch = dispatch;
    EpStep step;
    status[r] =
        step.Run(in, *backend, **comm, {n, false}, y.data() + b * H, nullptr);
    if (staged) {
      staged_calls[r] = static_cast<StagedCpuBackend&>(*backend).staged();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(rank, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << status[r];
  if (staged) {
    EXPECT_GT(staged_calls[0] + staged_calls[1], 0)
        << "the step never staged through host buffers";
  }
  return y;
}

std::vector<float> RunTwoRanks(const testing::GoldenCase& g,
                               const Routing& routing, bool staged) {
  return RunRanks(g, routing, staged, 2);
}

void ExpectTwoRanksEqualOne(const MoeLayerConfig& c, int64_t n, bool staged) {
  auto g = testing::RandomCase(c, n, 17 + n);
  auto source = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1,
                              std::max<int64_t>(n, 1));
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> alone(n * c.hidden);
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(0, g.x.data(), {.n = n}, alone.data(), &routing).ok());
  EXPECT_TRUE(testing::AllClose(alone, g.y, testing::kF32Tol));
  const std::vector<float> two = RunTwoRanks(g, routing, staged);
  EXPECT_EQ(two, alone) << "bits differ between 1 and 2 ranks";
  // One row per slot (no peers' ids): the same bits.
  EXPECT_EQ(RunRanks(g, routing, staged, 2, nullptr, /*peers_ids=*/false),
            alone)
      << "bits differ between 1 and 2 ranks, one row per slot";
  EXPECT_EQ(RunRanks(g, routing, staged, 3), alone)
      << "bits differ between 1 and 3 ranks";
}

// Two ranks, E = 4 (rank 0: experts 0-1, rank 1: 2-3), k = 3, 4 tokens
// (two per rank). Each token crosses to a rank once however many of its
// experts live there; the outputs keep one row per slot.
TEST(PlanEpStep, SendsATokenOncePerRank) {
  const std::vector<int32_t> all = {0, 1,  2,    // token 0 (rank 0's)
                                    1, -1, 0,    // token 1: rank 0 only
                                    3, 2,  1,    // token 2 (rank 1's)
                                    2, 3,  -1};  // token 3: rank 1 only
  std::vector<int64_t> counts(2 * 4, 0);
  for (int64_t i = 0; i < 12; ++i) {
    if (all[i] >= 0) ++counts[(i / 6) * 4 + all[i]];
  }
  const std::vector<float> x(2 * 4, 1.0f), w(6, 0.5f);
  std::vector<EpPlan> plans(2);
  for (int r = 0; r < 2; ++r) {
    EpStepInput in;
    in.tokens = 2;
    in.rows = x.data();
    in.slots = 3;
    in.expert_ids = absl::MakeConstSpan(all).subspan(r * 6, 6);
    in.all_expert_ids = all;
    in.weights = w;
    in.counts = counts;
    ASSERT_TRUE(PlanEpStep(in, r, 2, 4, 8, true, &plans[r]).ok());
    EXPECT_TRUE(plans[r].one_row_per_token);
  }
  const EpPlan& a = plans[0];
  const EpPlan& b = plans[1];
  // Rank 0 sends both tokens to itself, token 0 to rank 1; rank 1 sends
  // token 2 to rank 0 and both to itself.
  EXPECT_EQ(a.send_rows, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(a.src_row, (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(b.send_rows, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b.src_row, (std::vector<int64_t>{0, 0, 1}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(plans[r].recv_rows[0], plans[0].send_rows[r]);
    EXPECT_EQ(plans[r].recv_rows[1], plans[1].send_rows[r]);
    EXPECT_EQ(plans[r].return_rows[0], plans[0].home_rows[r]);
    EXPECT_EQ(plans[r].return_rows[1], plans[1].home_rows[r]);
  }
  // Rank 0's experts: expert 0 gets token 0 (row 0), token 1 (row 1);
  // expert 1 gets token 0 (row 0), token 1 (row 1), token 2 (row 2, from
  // rank 1). Its outputs go back in (source, expert, token) order.
  EXPECT_EQ(a.arrived, 3);
  EXPECT_EQ(a.received, 5);
  EXPECT_EQ(a.expert_offsets, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(a.grouped, (std::vector<int64_t>{0, 1, 0, 1, 2}));
  EXPECT_EQ(a.out_row, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Rank 1's: expert 2 gets token 0 (row 0), token 2 (row 1), token 3
  // (row 2); expert 3 gets token 2 (row 1), token 3 (row 2). Outputs to
  // rank 0 first (one: token 0's expert 2), then rank 1's by expert.
  EXPECT_EQ(b.arrived, 3);
  EXPECT_EQ(b.grouped, (std::vector<int64_t>{0, 1, 2, 1, 2}));
  EXPECT_EQ(b.out_row, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Rank 0's slots come back: its own in expert order, token 0's expert 2
  // from rank 1 last.
  EXPECT_EQ(a.slot_row, (std::vector<int64_t>{0, 2, 4, 3, -1, 1}));

  // Peers' ids that disagree with the counts, or with the rank's own rows,
  // are refused before anything is sized from them.
  std::vector<int32_t> bad = all;
  bad[8] = 0;  // token 2's third slot: expert 1 -> 0, counts unchanged
  EpStepInput in;
  in.tokens = 2;
  in.rows = x.data();
  in.slots = 3;
  in.expert_ids = absl::MakeConstSpan(all).subspan(0, 6);
  in.all_expert_ids = bad;
  in.weights = w;
  in.counts = counts;
  EpPlan p;
  absl::Status s = PlanEpStep(in, 0, 2, 4, 8, true, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("its expert ids hold"), std::string::npos) << s;
  in.all_expert_ids = all;
  in.expert_ids = absl::MakeConstSpan(all).subspan(6, 6);
  s = PlanEpStep(in, 0, 2, 4, 8, true, &p);  // rank 1's ids, not rank 0's
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("share of all_expert_ids"), std::string::npos)
      << s;
  // Without the peers' ids, or with rows scaled per slot: one row per slot.
  in.expert_ids = absl::MakeConstSpan(all).subspan(0, 6);
  in.all_expert_ids = {};
  ASSERT_TRUE(PlanEpStep(in, 0, 2, 4, 8, true, &p).ok());
  EXPECT_FALSE(p.one_row_per_token);
  EXPECT_EQ(p.sent, 5);
  in.all_expert_ids = all;
  ASSERT_TRUE(PlanEpStep(in, 0, 2, 4, 8, false, &p).ok());
  EXPECT_FALSE(p.one_row_per_token);
  EXPECT_EQ(p.send_rows, p.home_rows);
}

TEST(EpStep, TwoRanksOverGlooGiveTheSingleProcessBits) {
  for (int64_t n : {1, 2, 37}) ExpectTwoRanksEqualOne(Base(), n, false);
  MoeLayerConfig s = Base();
  s.score_before_experts = true;
  ExpectTwoRanksEqualOne(s, 29, false);
}

TEST(EpStep, HostStagedExchangeGivesTheSameBits) {
  for (int64_t n : {1, 37}) ExpectTwoRanksEqualOne(Base(), n, true);
}

TEST(EpStep, HotExpertOnOneRankLeavesTheOtherEmpty) {
  MoeLayerConfig c = Base();
  c.top_k = 1;
  auto g = testing::RandomCase(c, 12, 5);
  // Every token to expert 0 (rank 0): rank 1 computes nothing.
  Routing r;
  r.Reset(g.tokens, 1, c.num_experts);
  for (int64_t t = 0; t < g.tokens; ++t) {
    r.expert[t] = 0;
    r.weight[t] = 1.0f;
    r.dispatched[t] = 1;
  }
  const std::vector<float> y = RunTwoRanks(g, r, false);
  // Against the single process with the same routing: expert 0 alone.
  auto source = testing::MakeGoldenSource(g);
  CpuBackend backend(1);
  ASSERT_TRUE(backend.Load(*source, {}, g.tokens).ok());
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(r, g.tokens, 1, c.num_experts, &ids, &counts);
  EpStepInput in = OneRankInput(g.x, g.tokens, ids, r.weight, counts, 1);
  auto loopback = CreateLoopbackCommunicator();
  std::vector<float> alone(g.tokens * c.hidden);
  EpStep step;
  ASSERT_TRUE(
      step.Run(in, backend, *loopback, {g.tokens, false}, alone.data(), nullptr)
          .ok());
  EXPECT_EQ(y, alone);
}

// A backend whose piece `fail_at` fails (once), as a device backend's does
// when an allocation, a launch or a collective fails; its queue records the
// Drain that must follow.
class FailingBackend : public CpuBackend {
 public:
  enum Piece { kNone, kPrepare, kGather, kExperts, kCombine, kFinish };
  using CpuBackend::CpuBackend;
  Piece fail_at = kNone;
  int drains = 0;
  Communicator* drained_comm = nullptr;
  std::chrono::steady_clock::time_point drained_deadline{};

  absl::Status Prepare(const EpPlan& plan) override {
    return Fail(kPrepare) ? Error() : CpuBackend::Prepare(plan);
  }
  absl::Status Gather(const EpStepInput& in, const EpPlan& plan,
                      bool x_resident, const RowTransport& t) override {
    return Fail(kGather) ? Error()
                         : CpuBackend::Gather(in, plan, x_resident, t);
  }
  absl::Status RunExperts(int64_t layer, const EpPlan& plan, const void* in,
                          void* out) override {
    return Fail(kExperts) ? Error()
                          : CpuBackend::RunExperts(layer, plan, in, out);
  }
  absl::Status Combine(const EpStepInput& in, const EpPlan& plan,
                       const void* back, float* y) override {
    return Fail(kCombine) ? Error() : CpuBackend::Combine(in, plan, back, y);
  }
  StepQueue& queue() override { return queue_; }

 private:
  // The CPU's queue, whose Finish fails at kFinish and whose Drain is
  // recorded.
  class Queue : public HostQueue {
   public:
    explicit Queue(FailingBackend* b) : b_(b) {}
    absl::Status Finish(
        Communicator& comm,
        std::chrono::steady_clock::time_point deadline) override {
      return b_->Fail(kFinish) ? Error() : HostQueue::Finish(comm, deadline);
    }
    void Drain(Communicator& comm,
               std::chrono::steady_clock::time_point deadline) override {
      ++b_->drains;
      b_->drained_comm = &comm;
      b_->drained_deadline = deadline;
    }

   private:
    FailingBackend* b_;
  };

  bool Fail(Piece p) {
    if (p != fail_at) return false;
    fail_at = kNone;
    return true;
  }
  static absl::Status Error() {
    return absl::ResourceExhaustedError("injected: out of device memory");
  }
  Queue queue_{this};
};

// A failure at each piece of a step: the error is the piece's, the backend
// drains through the step's communicator by the step's deadline (never
// unbounded), and the same backend and step then give the exact answer.
TEST(EpStep, AFailedPieceDrainsByTheDeadlineAndTheNextStepIsExact) {
  MoeLayerConfig c = Base();
  auto g = testing::RandomCase(c, 7, 8);
  auto source = testing::MakeGoldenSource(g);
  Routing routing;
  {
    auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, 7);
    ASSERT_TRUE(moe.ok()) << moe.status();
    std::vector<float> y(7 * c.hidden);
    ASSERT_TRUE(
        (*moe)->Forward(0, g.x.data(), {.n = 7}, y.data(), &routing).ok());
  }
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(routing, 7, 1, c.num_experts, &ids, &counts);
  EpStepInput in =
      OneRankInput(g.x, 7, ids, routing.weight, counts, routing.slots);
  in.timeout = std::chrono::milliseconds(1500);
  auto loopback = CreateLoopbackCommunicator();
  std::vector<float> want(7 * c.hidden);
  {
    CpuBackend clean(1);
    ASSERT_TRUE(clean.Load(*source, {}, 7).ok());
    EpStep step;
    ASSERT_TRUE(
        step.Run(in, clean, *loopback, {7, false}, want.data(), nullptr).ok());
  }
  for (auto piece : {FailingBackend::kPrepare, FailingBackend::kGather,
                     FailingBackend::kExperts, FailingBackend::kCombine,
                     FailingBackend::kFinish}) {
    SCOPED_TRACE(static_cast<int>(piece));
    FailingBackend backend(1);
    ASSERT_TRUE(backend.Load(*source, {}, 7).ok());
    EpStep step;
    backend.fail_at = piece;
    std::vector<float> y(7 * c.hidden, -1.0f);
    const auto before = std::chrono::steady_clock::now();
    const absl::Status s =
        step.Run(in, backend, *loopback, {7, false}, y.data(), nullptr);
    const auto after = std::chrono::steady_clock::now();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_EQ(backend.drains, 1);
    EXPECT_EQ(backend.drained_comm, loopback.get());
    EXPECT_GE(backend.drained_deadline, before + in.timeout);
    EXPECT_LE(backend.drained_deadline, after + in.timeout);
    // Usable as before: the next step on the same backend is exact.
    ASSERT_TRUE(
        step.Run(in, backend, *loopback, {7, false}, y.data(), nullptr).ok());
    EXPECT_EQ(y, want);
    EXPECT_EQ(backend.drains, 1);
  }
}

// Redundant experts: every placement, whichever replica each slot goes to,
// gives the single process's bits.
TEST(EpStep, ReplicasDoNotChangeABit) {
  MoeLayerConfig c = Base();  // E = 6
  for (bool before : {false, true}) {
    c.score_before_experts = before;
    auto g = testing::RandomCase(c, 41, 3);
    auto source = testing::MakeGoldenSource(g);
    auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, g.tokens);
    ASSERT_TRUE(moe.ok()) << moe.status();
    std::vector<float> alone(g.tokens * c.hidden);
    Routing routing;
    ASSERT_TRUE(
        (*moe)
            ->Forward(0, g.x.data(), {.n = g.tokens}, alone.data(), &routing)
            .ok());
    // Load skewed towards experts 0 and 1 (so they get the replicas).
    std::vector<double> load = {50, 30, 5, 5, 5, 5};
    for (int world : {2, 3}) {
      for (int64_t R : {int64_t{world}, int64_t{2 * world}}) {
        auto p = ComputePlacement(load, world, R);
        ASSERT_TRUE(p.ok()) << p.status();
        ASSERT_TRUE(CheckPlacement(*p, c.num_experts, world, R).ok());
        EXPECT_EQ(RunRanks(g, routing, false, world, &*p), alone)
            << "bits differ with " << world << " ranks and R = " << R;
      }
    }
    // Every replica used: every token's first slot to expert 0, which two
    // workers hold.
    LayerPlacement two;
    two.workers = {{0, 1, 2, 0}, {3, 4, 5, 0}};
    Routing hot = routing;
    for (int64_t t = 0; t < g.tokens; ++t) hot.expert[t * hot.slots] = 0;
    EXPECT_EQ(RunRanks(g, hot, false, 2, &two), RunRanks(g, hot, false, 2))
        << "bits differ between the replicas of a hot expert";
  }
}

// The single process's y for `routing` on rows `x` (one rank, loopback).
// The CPU backend with every expert output rounded to bf16, as a packed
// combine sends them home.
class RoundedOutputsBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  absl::Status RunExperts(int64_t layer, const EpPlan& p, const void* in,
                          void* out) override {
    absl::Status s = CpuBackend::RunExperts(layer, p, in, out);
    float* rows = static_cast<float*>(out);
    for (int64_t i = 0; i < p.received * config().hidden; ++i) {
      rows[i] = Bf16ToF32(F32ToBf16(rows[i]));
    }
    return s;
  }
};

// The single process's step on rows `x`; with `round_outputs`, each expert
// output rounded to bf16 before the weighted sum.
std::vector<float> RunAlone(const testing::GoldenCase& g,
                            const std::vector<float>& x, const Routing& routing,
                            bool round_outputs = false) {
  auto source = testing::MakeGoldenSource(g);
  std::unique_ptr<CpuBackend> owned =
      round_outputs ? std::make_unique<RoundedOutputsBackend>(1)
                    : std::make_unique<CpuBackend>(1);
  CpuBackend& backend = *owned;
  EXPECT_TRUE(backend.Load(*source, {}, g.tokens).ok());
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(routing, g.tokens, 1, g.config.num_experts, &ids, &counts);
  EpStepInput in =
      OneRankInput(x, g.tokens, ids, routing.weight, counts, routing.slots);
  auto loopback = CreateLoopbackCommunicator();
  std::vector<float> y(g.tokens * g.config.hidden);
  EpStep step;
  EXPECT_TRUE(
      step.Run(in, backend, *loopback, {g.tokens, false}, y.data(), nullptr)
          .ok());
  return y;
}

// FP8 and bf16 dispatch change nothing but the rows the experts read and
// the precision their outputs come home in: the step over 2 and 3 ranks
// (and staged through host buffers) gives, bit for bit, the single
// process's y on x's rows rounded the same way (FP8: e4m3 codes with one
// scale per 128 channels, core/fp8_rows.h), every expert output rounded to
// bf16 before the fp32 weighted sum, at a width of one full and one narrow
// group of 128. At world size 1 nothing crosses, so there the flag changes
// nothing.
TEST(EpStep, PackedDispatchIsTheExactStepOnRoundedRows) {
  // Odd sizes; the second is large enough that packing runs on 2 threads.
  for (auto [tokens, hidden, threads] :
       {std::tuple{37, 200, 1}, std::tuple{301, 300, 2}}) {
    SCOPED_TRACE(::testing::Message() << tokens << "x" << hidden);
    MoeLayerConfig c = Base();
    c.hidden = hidden;
    auto g = testing::RandomCase(c, tokens, 11);
    const int64_t n = g.tokens, H = c.hidden;
    auto source = testing::MakeGoldenSource(g);
    auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, n);
    ASSERT_TRUE(moe.ok()) << moe.status();
    std::vector<float> exact(n * H);
    Routing routing;
    ASSERT_TRUE(
        (*moe)->Forward(0, g.x.data(), {.n = n}, exact.data(), &routing).ok());
    std::vector<uint8_t> packed(n * Fp8RowBytes(H));
    std::vector<float> fp8_x(n * H), bf16_x(n * H);
    QuantizeFp8Rows(g.x.data(), n, H, packed.data());
    DequantizeFp8Rows(packed.data(), n, H, fp8_x.data());
    for (int64_t i = 0; i < n * H; ++i) {
      bf16_x[i] = Bf16ToF32(F32ToBf16(g.x[i]));
    }
    const std::vector<float> fp8_want = RunAlone(g, fp8_x, routing, true);
    const std::vector<float> bf16_want = RunAlone(g, bf16_x, routing, true);
    // The combine's rounding alone is visible too.
    ASSERT_NE(bf16_want, RunAlone(g, bf16_x, routing));
    ASSERT_NE(fp8_want, exact);  // the rounding is visible in y
    for (int world : {2, 3}) {
      SCOPED_TRACE(world);
      for (bool peers_ids : {true, false}) {  // both dispatch layouts
        EXPECT_EQ(RunRanks(g, routing, false, world, nullptr, peers_ids,
                           DispatchDType::kFp8, threads),
                  fp8_want);
        EXPECT_EQ(RunRanks(g, routing, false, world, nullptr, peers_ids,
                           DispatchDType::kBf16, threads),
                  bf16_want);
      }
    }
    EXPECT_EQ(RunRanks(g, routing, true, 2, nullptr, true, DispatchDType::kFp8,
                       threads),
              fp8_want);
    // World size 1: the plan says row type, nothing is quantised.
    std::vector<int32_t> ids;
    std::vector<int64_t> counts;
    PlanDispatch(routing, n, 1, c.num_experts, &ids, &counts);
    EpStepInput in =
        OneRankInput(g.x, n, ids, routing.weight, counts, routing.slots);
    in.dispatch = DispatchDType::kFp8;
    CpuBackend backend(threads);
    ASSERT_TRUE(backend.Load(*source, {}, n).ok());
    auto loopback = CreateLoopbackCommunicator();
    std::vector<float> alone(n * H);
    EpStep step;
    ASSERT_TRUE(
        step.Run(in, backend, *loopback, {n, false}, alone.data(), nullptr)
            .ok());
    EXPECT_EQ(alone, exact);
  }
}

// A backend without a row codec (CUDA's, so far) refuses a packed step at
// plan time, before anything is queued, naming the router flag: every rank
// refuses, none waits on a peer, and the group stays usable.
class NoPackingBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  std::string name() const override { return "cuda:0"; }
  RowCodec* row_codec() override { return nullptr; }
  absl::Status Prepare(const EpPlan& plan) override {
    ++prepared;
    return CpuBackend::Prepare(plan);
  }
  int prepared = 0;
};

TEST(EpStep, ABackendWithoutFp8PackingRefusesBeforeTheExchange) {
  MoeLayerConfig c = Base();
  auto g = testing::RandomCase(c, 9, 4);
  auto source = testing::MakeGoldenSource(g);
  Routing routing;
  {
    auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, 9);
    ASSERT_TRUE(moe.ok()) << moe.status();
    std::vector<float> y(9 * c.hidden);
    ASSERT_TRUE(
        (*moe)->Forward(0, g.x.data(), {.n = 9}, y.data(), &routing).ok());
  }
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(routing, 9, 2, c.num_experts, &ids, &counts);
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> status(2);
  bool intact[2] = {false, false};  // not vector<bool>: one word, two writers
  int prepared[2] = {-1, -1};
  // Both groups outlive both steps: no collective ever synchronises the
  // ranks here, and a rank that dropped its end early would break the
  // other's connect.
  std::unique_ptr<Communicator> comms[2];
  auto rank = [&](int r) {
    NoPackingBackend backend(1);
    LoadOptions opts;
    opts.load_gate = false;
    opts.load_shared = false;
    opts.expert_begin = SplitBegin(r, 2, c.num_experts);
    opts.expert_end = SplitBegin(r + 1, 2, c.num_experts);
    status[r] = backend.Load(*source, opts, 9);
    if (!status[r].ok()) return;
    auto comm = CreateGlooCommunicator(r, 2, "127.0.0.1", store,
                                       std::chrono::seconds(30));
    if (!comm.ok()) {
      status[r] = comm.status();
      return;
    }
    comms[r] = *std::move(comm);
    const int64_t b = SplitBegin(r, 2, 9), e = SplitBegin(r + 1, 2, 9);
    const int64_t S = routing.slots;
    EpStepInput in;
    in.tokens = e - b;
    in.rows = g.x.data() + b * c.hidden;
    in.slots = S;
    in.expert_ids = absl::MakeConstSpan(ids).subspan(b * S, (e - b) * S);
    in.weights =
        absl::MakeConstSpan(routing.weight).subspan(b * S, (e - b) * S);
    in.counts = counts;
    in.dispatch = DispatchDType::kFp8;
    std::vector<float> y((e - b) * c.hidden);
    EpStep step;
    status[r] = step.Run(in, backend, *comms[r], {9, false}, y.data(), nullptr);
    intact[r] = step.collectives_intact();
    prepared[r] = backend.prepared;
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kFailedPrecondition)
        << status[r];
    EXPECT_NE(status[r].message().find("--dispatch-dtype fp8"),
              std::string::npos)
        << status[r];
    EXPECT_NE(status[r].message().find("cuda:0"), std::string::npos)
        << status[r];
    EXPECT_TRUE(intact[r]);
    EXPECT_EQ(prepared[r], 0) << "refused after the step's buffers were set";
  }
}

// Direct steps (engine/direct_plan.h): the step as `world` ranks with no
// collective. Each rank gets the rows of the tokens with a slot on it and
// returns its slots' outputs in slot order; the outputs, put together in
// rank order, are summed as the router sums them. y [n, H]; `idle`: the
// ranks that got no rows.
std::vector<float> RunDirectRanks(
    const testing::GoldenCase& g, const Routing& routing, int world,
    bool staged = false, const LayerPlacement* placement = nullptr,
    DispatchDType dispatch = DispatchDType::kRowType, int* idle = nullptr) {
  const MoeLayerConfig& c = g.config;
  const int64_t n = g.tokens, H = c.hidden, S = routing.slots;
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  ReplicaMap replicas;
  if (placement != nullptr) {
    replicas = MakeReplicaMap(*placement, c.num_experts);
  }
  PlanDispatch(routing, n, world, c.num_experts, &ids, &counts,
               placement != nullptr ? &replicas : nullptr);
  const int64_t experts =
      placement != nullptr ? replicas.physical : c.num_experts;
  DirectPlan d;
  PlanDirectStep(ids, n, S, world, experts, &d);
  auto source = testing::MakeGoldenSource(g);
  std::vector<char> outputs;
  ElementType type = ElementType::kF32;
  if (idle != nullptr) *idle = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t first = d.token_offsets[r];
    const int64_t tokens = d.token_offsets[r + 1] - first;
    if (tokens == 0) {
      if (idle != nullptr) ++*idle;
      EXPECT_EQ(d.row_offsets[r + 1], d.row_offsets[r]);
      continue;
    }
    std::unique_ptr<CpuBackend> backend = RankBackend(staged, 1);
    EXPECT_TRUE(
        backend->Load(*source, ShardOptions(c, r, world, placement), n).ok());
    std::vector<float> rows(tokens * H);
    for (int64_t i = 0; i < tokens; ++i) {
      std::copy_n(g.x.data() + d.token[first + i] * H, H, rows.data() + i * H);
    }
    std::vector<int32_t> rank_ids;
    std::vector<float> rank_w;
    std::vector<int64_t> rank_counts;
    DirectRankSlots(d, r, world, experts, ids, routing.weight, &rank_ids,
                    &rank_w, &rank_counts);
    EpStepInput in;
    in.tokens = tokens;
    in.rows = rows.data();
    in.slots = S;
    in.expert_ids = rank_ids;
    in.weights = rank_w;
    in.counts = rank_counts;
    in.experts = experts;
    in.dispatch = dispatch;
    EpStep step;
    DirectOutputs out;
    EpStepTimes times;
    absl::Status s = step.RunDirect(in, *backend, {r, world}, n, &out, &times);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    EXPECT_TRUE(step.collectives_intact());
    // Nothing crosses, yet a packed dispatch still packs both ways.
    EXPECT_FALSE(step.transport().dispatch.exchange);
    EXPECT_FALSE(step.transport().combine.exchange);
    EXPECT_EQ(step.transport().packs(), dispatch != DispatchDType::kRowType);
    EXPECT_EQ(times.expert_rows, d.row_offsets[r + 1] - d.row_offsets[r]);
    type = out.type;
    // Slot order, as the worker returns them (EncodeDirectResult).
    const size_t row_bytes = H * DTypeSize(type);
    outputs.resize(d.row_offsets[world] * row_bytes);
    char* dst = outputs.data() + d.row_offsets[r] * row_bytes;
    for (int64_t i = 0; i < tokens * S; ++i) {
      if (out.slot_row[i] < 0) continue;
      std::memcpy(
          dst, static_cast<const char*>(out.rows) + out.slot_row[i] * row_bytes,
          row_bytes);
      dst += row_bytes;
    }
    EXPECT_EQ(dst, outputs.data() + d.row_offsets[r + 1] * row_bytes);
  }
  std::vector<float> y(n * H, -1.0f);
  const float* w = c.score_before_experts ? nullptr : routing.weight.data();
  SumDirectOutputs(d, H, type, outputs.data(), w, y.data());
  return y;
}

// The router's sum of a direct step: each token's slot rows, weighted, in
// slot order; weight 1 without weights; BF16 rows widened exactly.
TEST(SumDirectOutputs, SumsEachTokensSlotRowsWeightedInSlotOrder) {
  DirectPlan d;
  d.tokens = 2;
  d.slots = 2;
  d.slot_row = {1, -1, 0, 2};  // token 0: row 1; token 1: rows 0 and 2
  const std::vector<float> rows = {1, 2, 10, 20, 100, 200};  // [3, 2]
  const std::vector<float> w = {0.5f, 9, 2, 0.25f};
  std::vector<float> y(4, -1);
  SumDirectOutputs(d, 2, ElementType::kF32, rows.data(), w.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{5, 10, 27, 54}));
  SumDirectOutputs(d, 2, ElementType::kF32, rows.data(), nullptr, y.data());
  EXPECT_EQ(y, (std::vector<float>{10, 20, 101, 202}));
  std::vector<uint16_t> bf16(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) bf16[i] = F32ToBf16(rows[i]);
  SumDirectOutputs(d, 2, ElementType::kBF16, bf16.data(), w.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{5, 10, 27, 54}));
}

// The router's plan of a direct step: each rank gets a token once however
// many of its slots it computes, ranks' tokens ascending, and every slot's
// output row is where its rank returns it.
TEST(PlanDirectStep, EachRankGetsItsTokensOnceAndRowsInSlotOrder) {
  // E = 4 over two ranks (0-1, 2-3), 3 slots.
  const std::vector<int32_t> ids = {0,  2,  1,   // token 0: both ranks
                                    3,  -1, 2,   // token 1: rank 1 only
                                    -1, -1, -1,  // token 2: nowhere
                                    1,  0,  3};  // token 3: both
  DirectPlan d;
  PlanDirectStep(ids, 4, 3, 2, 4, &d);
  EXPECT_EQ(d.token_offsets, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(d.token, (std::vector<int64_t>{0, 3, 0, 1, 3}));
  EXPECT_EQ(d.row_offsets, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(d.slot_row,
            (std::vector<int64_t>{0, 4, 1, 5, -1, 6, -1, -1, -1, 2, 3, 7}));
  std::vector<int32_t> rank_ids;
  std::vector<float> w(12, 0.5f), rank_w;
  std::vector<int64_t> counts;
  DirectRankSlots(d, 1, 2, 4, ids, w, &rank_ids, &rank_w, &counts);
  EXPECT_EQ(rank_ids, (std::vector<int32_t>{-1, 2, -1, 3, -1, 2, -1, -1, 3}));
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 2, 2}));
  EXPECT_EQ(rank_w.size(), 9u);
}

// A direct step has the bits of the single process (and so of the
// all-to-all path) at 2 and 3 ranks: odd sizes, one token, rows scaled
// before the experts, staged through host buffers, and redundant experts.
TEST(EpStep, DirectStepsGiveTheSingleProcessBits) {
  for (bool before : {false, true}) {
    MoeLayerConfig c = Base();
    c.score_before_experts = before;
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{41}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " before=" << before);
      auto g = testing::RandomCase(c, n, 5 + n);
      auto source = testing::MakeGoldenSource(g);
      auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, n);
      ASSERT_TRUE(moe.ok()) << moe.status();
      std::vector<float> alone(n * c.hidden);
      Routing routing;
      ASSERT_TRUE((*moe)
                      ->Forward(0, g.x.data(), {.n = n}, alone.data(), &routing)
                      .ok());
      for (int world : {2, 3}) {
        EXPECT_EQ(RunDirectRanks(g, routing, world), alone) << world;
      }
      EXPECT_EQ(RunDirectRanks(g, routing, 2, /*staged=*/true), alone);
      LayerPlacement two;
      two.workers = {{0, 1, 2, 0}, {3, 4, 5, 1}};
      EXPECT_EQ(RunDirectRanks(g, routing, 2, false, &two), alone);
    }
  }
}

// A hot expert: every slot on rank 0's experts leaves rank 1 without a row,
// so it is not part of the step at all.
TEST(EpStep, DirectStepLeavesARankWithNoSlotOut) {
  MoeLayerConfig c = Base();
  auto g = testing::RandomCase(c, 9, 2);
  auto source = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, 9);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(9 * c.hidden);
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(0, g.x.data(), {.n = 9}, y.data(), &routing).ok());
  for (int64_t i = 0; i < 9 * routing.slots; ++i) {
    routing.expert[i] = static_cast<int32_t>(i % routing.slots);  // 0 and 1
  }
  int idle = -1;
  const std::vector<float> direct = RunDirectRanks(
      g, routing, 2, false, nullptr, DispatchDType::kRowType, &idle);
  EXPECT_EQ(idle, 1);
  EXPECT_EQ(direct, RunRanks(g, routing, false, 2));
}

// Packed dispatch: a direct step rounds rows and outputs exactly as the
// all-to-all does, so its y is the all-to-all path's, bit for bit.
TEST(EpStep, DirectStepsRoundAsThePackedAllToAll) {
  MoeLayerConfig c = Base();
  c.hidden = 200;  // one full and one narrow group of 128
  auto g = testing::RandomCase(c, 23, 8);
  auto source = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, 23);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> exact(23 * c.hidden);
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(0, g.x.data(), {.n = 23}, exact.data(), &routing).ok());
  for (DispatchDType dispatch : {DispatchDType::kBf16, DispatchDType::kFp8}) {
    SCOPED_TRACE(DispatchDTypeName(dispatch));
    for (int world : {2, 3}) {
      const std::vector<float> direct =
          RunDirectRanks(g, routing, world, false, nullptr, dispatch);
      EXPECT_NE(direct, exact);
      EXPECT_EQ(direct,
                RunRanks(g, routing, false, world, nullptr, true, dispatch));
    }
  }
}

}  // namespace
}  // namespace moe
