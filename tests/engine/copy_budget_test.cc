// The copy budget of a GPU layer, checked on the CPU: the device
// backend's host logic (engine/device_backend.h), the code the CUDA backend
// runs, drives a counting device queue whose "device memory" is host memory
// and whose math does nothing. Per step, the host-to-device bytes must be
// the activations once in their element type plus O(N x k) of routing, the
// device-to-host bytes the output once plus O(N x k), the host must wait at
// most once for the step (at P = 0 once more for the routing, which the
// host plans from), and nothing may be allocated.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/gloo_communicator.h"
#include "core/dtype.h"
#include "core/even_split.h"
#include "core/status_macros.h"
#include "engine/caller_overrides.h"
#include "engine/device_backend.h"
#include "engine/device_load.h"
#include "engine/ep_step.h"
#include "engine/expert_frame.h"
#include "engine/local_moe.h"
#include "engine/token_router.h"
#include "engine/weight_values.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "tests/testutil/bf16_forward_check.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

// Routing bytes allowed per (token, slot), each way: the plan's index
// arrays (five int32 or fp32 per slot up) and the top-k ids and weights
// (two per slot home). An extra copy of the activations (H = 256: 1 KB a
// row in fp32) cannot hide under it.
constexpr int64_t kRoutingBytesPerSlot = 32;

struct Counts {
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  int64_t syncs = 0;
  int64_t allocations = 0;
};

// The device, counted and deferred as a GPU's stream is: copies and kernels
// are queued and applied in order only at a wait (cudaStreamSynchronize in
// CopyToHost, Synchronize, Finish and Drain), each wait counted once. What
// a real stream may do late shows: a download's pinned destination is
// poisoned when the copy is issued (the host reading it before the wait
// reads NaN), an upload reads its pinned source only at the wait, and a
// pinned source rewritten between issue and wait is recorded as a hazard
// (on a GPU the copy might read either bytes), after which the source is
// poisoned. Pageable sources are read at issue, as cudaMemcpyAsync stages
// them.
class CountingQueue : public DeviceStepQueue {
 public:
  Counts counts;
  // What the host logic did that a GPU could run in the wrong order.
  std::vector<std::string> hazards;

  // Every test under this queue fails on a hazard.
  ~CountingQueue() override {
    EXPECT_TRUE(hazards.empty()) << absl::StrJoin(hazards, "; ");
  }

  // Queues a fake kernel: it runs at the next wait, after what was queued.
  void Launch(std::function<void()> kernel) {
    pending_.push_back(std::move(kernel));
  }
  int64_t queued() const { return static_cast<int64_t>(pending_.size()); }

  void* stream() override { return nullptr; }
  void Mark(EpMark) override {}
  double ElapsedUs(EpMark, EpMark) const override { return 0; }
  absl::Status CopyToHost(const void* src, void* dst, size_t bytes) override {
    counts.d2h_bytes += bytes;
    ++counts.syncs;  // synchronous
    ++waits_;
    Apply();
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(const void* src, void* dst, size_t bytes) override {
    counts.h2d_bytes += bytes;
    if (bytes == 0) return absl::OkStatus();
    auto issued = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    if (!Pinned(src, bytes)) {
      Launch(
          [dst, issued] { std::memcpy(dst, issued->data(), issued->size()); });
      return absl::OkStatus();
    }
    const int64_t upload = ++uploads_;
    Launch([this, src, dst, bytes, issued, upload] {
      if (std::memcmp(src, issued->data(), bytes) != 0) {
        hazards.push_back(absl::StrCat(
            "upload ", upload, " (", bytes,
            " bytes): its pinned staging was rewritten before the upload was "
            "waited on"));
      }
      std::memcpy(dst, src, bytes);
      std::memset(const_cast<void*>(src), 0xff, bytes);
    });
    return absl::OkStatus();
  }
  absl::Status Download(const void* src, void* dst, size_t bytes) override {
    counts.d2h_bytes += bytes;
    if (bytes == 0) return absl::OkStatus();
    if (Pinned(dst, bytes)) std::memset(dst, 0xff, bytes);
    Launch([src, dst, bytes] { std::memcpy(dst, src, bytes); });
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    ++counts.syncs;
    ++waits_;
    Apply();
    return absl::OkStatus();
  }
  void CopyAtFinish(const void* pinned, void* dst, size_t bytes) override {
    pending_src_ = pinned;
    pending_dst_ = dst;
    pending_bytes_ = bytes;
  }
  absl::Status Finish(Communicator& comm,
                      std::chrono::steady_clock::time_point deadline) override {
    if (absl::Status s = comm.Await(nullptr, deadline); !s.ok()) return s;
    ++counts.syncs;
    ++waits_;
    Apply();
    if (pending_bytes_ > 0)
      std::memcpy(pending_dst_, pending_src_, pending_bytes_);
    pending_bytes_ = 0;
    return absl::OkStatus();
  }
  void Drain(Communicator&, std::chrono::steady_clock::time_point) override {
    ++counts.syncs;
    ++waits_;
    Apply();
    pending_bytes_ = 0;
  }
  Traffic traffic() const override {
    return {counts.h2d_bytes, counts.d2h_bytes, counts.syncs};
  }
  // Not reset with the counts, which the tests reset per step.
  int64_t waits() const override { return waits_; }
  absl::StatusOr<Block> Allocate(Memory where, size_t bytes) override {
    ++counts.allocations;
    char* p = new char[bytes]();
    if (where == Memory::kPinnedHost) pinned_.push_back({p, bytes});
    return Block(p, [](void* q) { delete[] static_cast<char*>(q); });
  }

 private:
  // Runs what was queued, in order.
  void Apply() {
    for (size_t i = 0; i < pending_.size(); ++i) pending_[i]();
    pending_.clear();
  }
  bool Pinned(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    for (const auto& [base, size] : pinned_) {
      if (c >= base && c + bytes <= base + size) return true;
    }
    return false;
  }

  std::vector<std::function<void()>> pending_;
  std::vector<std::pair<const char*, size_t>> pinned_;
  int64_t uploads_ = 0, waits_ = 0;
  const void* pending_src_ = nullptr;
  void* pending_dst_ = nullptr;
  size_t pending_bytes_ = 0;
};

// The CUDA backend's host logic over the counting queue, with math that
// does nothing but route token t to experts t, t + 1, ... (mod E) and copy
// the resident rows as the shared expert's output (the identity expert, so
// that what the host does around it shows).
class FakeDeviceBackend : public DeviceBackend {
  using Memory = DeviceStepQueue::Memory;
  using Block = DeviceStepQueue::Block;

 public:
  absl::Status Init(const MoeLayerConfig& c, int64_t max_tokens, bool gate,
                    int64_t expert_begin, int64_t expert_end) {
    config_ = c;
    max_tokens_ = max_tokens;
    gate_ = gate;
    expert_begin_ = expert_begin;
    expert_end_ = expert_end;
    if (absl::Status s = ReserveIo(gate); !s.ok()) return s;
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kWorkspaces));
    // The step's row buffers (rows of the experts' width) and the routing's
    // answer, at load as the CUDA backend makes them.
    const size_t rows = bounds_.rows * c.expert_width() * 2;
    for (Block* b : {&send_, &recv_, &out_, &back_}) {
      absl::StatusOr<Block> m = queue_->Allocate(Memory::kDevice, rows);
      if (!m.ok()) return m.status();
      *b = *m;
    }
    for (Block* b : {&idx_, &weights_}) {
      absl::StatusOr<Block> m =
          queue_->Allocate(Memory::kDevice, max_tokens * c.top_k * 4);
      if (!m.ok()) return m.status();
      *b = *m;
    }
    absl::StatusOr<Block> m =
        queue_->Allocate(Memory::kDevice, max_tokens * c.num_experts * 4);
    if (!m.ok()) return m.status();
    logits_ = *m;
    return AtLoadPoint(LoadPoint::kStepBuffers);
  }
  CountingQueue& counting() { return *queue_; }
  // The host copies of the router part (the experts' frames, Gemma 4's
  // router scales and shared norms), as the CUDA backend's Load takes them.
  absl::Status LoadHostPartsOf(const ModelSource& source) {
    LoadOptions o;
    o.dtype = WeightDType::kF32;
    return LoadHostParts(source, o);
  }

  std::string name() const override { return "fake-device"; }
  // As the CUDA backend loads: into a fresh backend, waiting for its own
  // queue only, taken whole once all of it loaded, with the same failure
  // points (engine/device_load.h).
  absl::Status Load(const ModelSource& source, const LoadOptions& options,
                    int64_t max_tokens) override {
    auto next = std::make_unique<FakeDeviceBackend>();
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kWeights));
    if (options.load_gate) {
      MOE_RETURN_IF_ERROR(next->LoadHostParts(source, options));
    }
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kHostParts));
    MOE_RETURN_IF_ERROR(next->queue_->Synchronize());
    MOE_RETURN_IF_ERROR(AtLoadPoint(LoadPoint::kUploadsDone));
    const MoeLayerConfig& c = source.info().layer;
    MOE_RETURN_IF_ERROR(
        next->Init(c, max_tokens, options.load_gate, 0, c.num_experts));
    using std::swap;
    AdoptHostLogic(*next);
    swap(queue_, next->queue_);
    swap(gate_, next->gate_);
    swap(expert_begin_, next->expert_begin_);
    swap(expert_end_, next->expert_end_);
    swap(send_, next->send_);
    swap(recv_, next->recv_);
    swap(out_, next->out_);
    swap(back_, next->back_);
    swap(idx_, next->idx_);
    swap(weights_, next->weights_);
    swap(logits_, next->logits_);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const override {
    return absl::UnimplementedError("a fake");
  }
  absl::StatusOr<LayerShard> Shard(int64_t layer) const override {
    if (layer != 0) return absl::NotFoundError("layer 0 only");
    LayerShard s;
    s.num_experts = config_.num_experts;
    s.has_shared_expert = config_.has_shared();
    s.gate_loaded = s.shared_loaded = gate_;
    s.expert_begin = expert_begin_;
    s.expert_end = expert_end_;
    s.local_experts = expert_end_ - expert_begin_;
    return s;
  }
  absl::Status RunExperts(int64_t, const EpPlan&, const void*, void*) override {
    return absl::OkStatus();
  }

 protected:
  DeviceStepQueue& device_queue() override { return *queue_; }
  absl::Status CheckShared(int64_t) override {
    return gate_ && config_.has_shared()
               ? absl::OkStatus()
               : absl::FailedPreconditionError("no shared expert");
  }
  absl::Status QueueRoute(const DeviceRouteQuery& query,
                          DeviceRouteAnswer* answer) override {
    const int64_t k = config_.top_k, E = config_.num_experts, n = query.n;
    if (query.host_logits) {
      // The device's logits favour experts t, t + 1, ... for token t.
      auto* logits = static_cast<float*>(logits_.get());
      queue_->Launch([logits, n, E] {
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t e = 0; e < E; ++e) {
            logits[t * E + e] = -static_cast<float>((e - t % E + E) % E);
          }
        }
      });
      answer->logits = logits;
      return absl::OkStatus();
    }
    auto* idx = static_cast<int32_t*>(idx_.get());
    auto* w = static_cast<float*>(weights_.get());
    queue_->Launch([idx, w, n, k, E] {
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          idx[t * k + j] = static_cast<int32_t>((t + j) % E);
          w[t * k + j] = 1.0f / k;
        }
      }
    });
    answer->idx = idx;
    answer->weights = w;
    return absl::OkStatus();
  }
  // The host's routing, as the CUDA backend's: TokenRouter on the
  // downloaded logits with the caller's overrides.
  absl::Status RouteLogits(int64_t, const float* logits, const RouteRows& rows,
                           Routing* routing) override {
    return host_router_.RouteLogits(config_, RouteTables(), logits, rows, 1,
                                    routing);
  }
  absl::Status QueueShared(int64_t, int64_t n, float* out) override {
    const float* x = device_x();
    const size_t bytes = n * config_.hidden * 4;
    queue_->Launch([out, x, bytes] { std::memcpy(out, x, bytes); });
    return absl::OkStatus();
  }
  absl::Status QueueWiden(const uint16_t*, int64_t, float*) override {
    return absl::OkStatus();
  }
  absl::Status QueueAdd(float*, const float*, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status PrepareStep(const EpPlan&) override {
    SetBuffer(EpBuffer::kSend, send_.get());
    SetBuffer(EpBuffer::kRecv, recv_.get());
    SetBuffer(EpBuffer::kOut, out_.get());
    SetBuffer(EpBuffer::kBack, back_.get());
    return absl::OkStatus();
  }
  absl::Status QueueGather(const EpPlan&, bool) override {
    return absl::OkStatus();
  }
  absl::Status QueueCombine(const EpPlan&, const void*, float*) override {
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<CountingQueue> queue_ = std::make_unique<CountingQueue>();
  bool gate_ = false;
  int64_t expert_begin_ = 0, expert_end_ = 0;
  Block send_, recv_, out_, back_, idx_, weights_, logits_;
  TokenRouter host_router_;
};

MoeLayerConfig BudgetConfig() {
  MoeLayerConfig c;
  c.hidden = 256;
  c.inter = 64;
  c.num_experts = 16;
  c.top_k = 4;
  c.shared_inter = 64;
  c.shared_gate = true;
  return c;
}

// A worker's layer of the LatentMoE kind (Nemotron 3): non-gated relu2
// experts on rows of the latent width, a quarter of H.
MoeLayerConfig LatentNonGatedConfig() {
  MoeLayerConfig c = BudgetConfig();
  c.gated = false;
  c.act = Activation::kRelu2;
  c.latent = c.hidden / 4;
  c.latent_bias = true;
  return c;
}

// One step's counts against the budget: `rows` activation rows of `width`
// each way (`in_size` bytes an element in, fp32 out), `slots` routing
// slots.
void ExpectBudget(const Counts& got, int64_t rows, int64_t slots, int64_t width,
                  int64_t max_syncs, int64_t in_size = 4) {
  const int64_t in = rows * width * in_size, out = rows * width * 4;
  const int64_t routing = kRoutingBytesPerSlot * slots;
  EXPECT_GE(got.h2d_bytes, in) << "x did not go up whole";
  EXPECT_LE(got.h2d_bytes, in + routing)
      << "host to device: more than x once and the routing";
  EXPECT_GE(got.d2h_bytes, out) << "y did not come home whole";
  EXPECT_LE(got.d2h_bytes, out + routing)
      << "device to host: more than y once and the routing";
  EXPECT_LE(got.syncs, max_syncs);
  EXPECT_EQ(got.allocations, 0) << "the step allocated";
}

// The router at P = 0 (LocalMoe over the device backend): x up once, the
// top-k ids and weights home, y home once with the shared expert summed on
// the device; two waits a layer, one for the routing (the host plans from
// it) and one at the step's end.
TEST(CopyBudget, RouterAtP0MovesEachActivationByteOnceEachWay) {
  const MoeLayerConfig c = BudgetConfig();
  for (int64_t n : {1, 64, 4096}) {
    SCOPED_TRACE(n);
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(c, 4096, /*gate=*/true, 0, c.num_experts).ok());
    LocalMoe moe(&b);
    std::vector<float> x(n * c.hidden, 0.5f), y(n * c.hidden);
    const int64_t ends[] = {n};
    for (int step = 0; step < 2; ++step) {  // the first step too
      b.counting().counts = Counts();
      Routing routing;
      ASSERT_TRUE(moe.Forward(0, x.data(), {.n = n, .segment_ends = ends},
                              y.data(), &routing)
                      .ok());
      ExpectBudget(b.counting().counts, n, n * c.top_k, c.hidden,
                   /*max_syncs=*/2);
    }
  }
}

// A bf16 request at P = 0: x goes up as bf16 (half the bytes), widened on
// the device, not on the host.
TEST(CopyBudget, RouterAtP0SendsABf16RequestUpAsBf16) {
  const MoeLayerConfig c = BudgetConfig();
  for (int64_t n : {1, 64, 4096}) {
    SCOPED_TRACE(n);
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(c, 4096, /*gate=*/true, 0, c.num_experts).ok());
    LocalMoe moe(&b);
    std::vector<uint16_t> x(n * c.hidden, 0x3f00);  // 0.5
    std::vector<float> y(n * c.hidden);
    const int64_t ends[] = {n};
    for (int step = 0; step < 2; ++step) {
      b.counting().counts = Counts();
      Routing routing;
      ASSERT_TRUE(moe.ForwardBf16(0, x.data(), {.n = n, .segment_ends = ends},
                                  y.data(), &routing)
                      .ok());
      ExpectBudget(b.counting().counts, n, n * c.top_k, c.hidden,
                   /*max_syncs=*/2,
                   /*in_size=*/2);
    }
  }
}

// A layer the device routes by itself (token choice, no capacity limit)
// brings its logits home when a request sends logits to score or wants
// them back, and the host scores the caller's rows from the caller's
// logits: each request gets the routing its own logits give.
TEST(CopyBudget, CallerLogitsOnADeviceRoutedLayerAreScoredOnTheHost) {
  const MoeLayerConfig c = BudgetConfig();
  const int64_t n = 6, E = c.num_experts, k = c.top_k;
  FakeDeviceBackend b;
  ASSERT_TRUE(b.Init(c, 64, /*gate=*/true, 0, E).ok());
  LocalMoe moe(&b);
  std::vector<float> x(n * c.hidden, 0.5f), y(n * c.hidden);
  // Rows [0, 3) are the device's; rows [3, 6) send logits favouring
  // experts 9, 10, 11, 12 in that order.
  const int64_t ends[] = {3, n};
  const RouteSource route[] = {RouteSource::kGate, RouteSource::kLogits};
  std::vector<float> sent(n * E, 0.0f);
  for (int64_t t = 3; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) sent[t * E + 9 + j] = 10.0f - j;
  }
  for (const bool keep : {false, true}) {
    SCOPED_TRACE(keep);
    CallerOverrides caller;
    caller.route = route;
    caller.logits = sent.data();
    caller.keep_logits = keep;
    Routing routing;
    const absl::Status s = moe.Forward(
        0, x.data(), {.n = n, .segment_ends = ends, .caller = &caller},
        y.data(), &routing);
    ASSERT_TRUE(s.ok()) << s;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t want = t < 3 ? static_cast<int32_t>((t + j) % E)
                                   : static_cast<int32_t>(9 + j);
        EXPECT_EQ(routing.expert[t * k + j], want) << t << " " << j;
      }
    }
    if (keep) {
      ASSERT_EQ(routing.logits.size(), static_cast<size_t>(n * E));
      for (int64_t e = 0; e < E; ++e) {
        EXPECT_EQ(routing.logits[4 * E + e], sent[4 * E + e]) << e;
        EXPECT_EQ(routing.logits[1 * E + e],
                  -static_cast<float>((e - 1 + E) % E))
            << e;
      }
    }
  }
}

// On the CPU a bf16 request is the fp32 request of its widened rows, bit
// for bit.
TEST(CopyBudget, ABf16RequestOnTheCpuGivesTheWidenedRowsBits) {
  MoeLayerConfig c = BudgetConfig();
  c.hidden = 32;
  c.inter = 16;
  c.shared_inter = 16;
  testing::ExpectBf16ForwardGivesWidenedRowsBits(c, /*n=*/9, /*seed=*/7, "cpu",
                                                 WeightDType::kF32, 16);
}

// A device group (NCCL's part) over Gloo: the fake device's memory is the
// host's, so rows cross between ranks without staging.
class DeviceGroup : public Communicator {
 public:
  explicit DeviceGroup(std::unique_ptr<Communicator> gloo)
      : gloo_(std::move(gloo)) {}
  int rank() const override { return gloo_->rank(); }
  int size() const override { return gloo_->size(); }
  std::string name() const override { return "device group"; }
  bool device_memory() const override { return true; }
  absl::Status AllToAllV(const void* send, absl::Span<const int64_t> sc,
                         void* recv, absl::Span<const int64_t> rc,
                         ElementType type, std::chrono::milliseconds timeout,
                         void*) override {
    return gloo_->AllToAllV(send, sc, recv, rc, type, timeout, nullptr);
  }

 private:
  std::unique_ptr<Communicator> gloo_;
};

// LatentMoE on a device router part (P = 0): the frame runs on the host with
// the CPU's code and bits, x goes up for the routing and again for the
// shared expert (the latent rows took its place on the device), the latent
// rows up once, their sum home once and the shared expert home apart; a wait
// for the routing, one at the step's end and one for the shared expert.
// Layer 0's expert frame on `device` gives the CPU backend's bits both
// ways: the rows the experts read for x [n, H], and y from their sum.
void ExpectFrameAsTheCpus(ExpertBackend& device, ExpertBackend& cpu,
                          const float* x, int64_t n) {
  const int64_t H = cpu.config().hidden, W = cpu.config().expert_width();
  auto dev_rows = device.EnterExperts(0, x, n);
  ASSERT_TRUE(dev_rows.ok()) << dev_rows.status();
  const std::vector<float> rows(*dev_rows, *dev_rows + n * W);
  auto cpu_rows = cpu.EnterExperts(0, x, n);
  ASSERT_TRUE(cpu_rows.ok()) << cpu_rows.status();
  EXPECT_EQ(std::memcmp(rows.data(), *cpu_rows, n * W * 4), 0);
  std::vector<float> s1 = rows, s2 = rows, y1(n * H), y2(n * H);
  ASSERT_TRUE(device.LeaveExperts(0, s1.data(), n, y1.data()).ok());
  ASSERT_TRUE(cpu.LeaveExperts(0, s2.data(), n, y2.data()).ok());
  EXPECT_EQ(y1, y2);
}

TEST(CopyBudget, RouterAtP0RunsTheLatentFrameOnTheHostWithTheCpusBits) {
  int checked = 0;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    const MoeLayerConfig& cfg = c->config;
    if (cfg.latent == 0) continue;
    SCOPED_TRACE(c->name);
    ASSERT_TRUE(CheckDeviceLayerMath(cfg, "cuda:0", /*router_part=*/true).ok());
    ++checked;
    auto source = testing::MakeGoldenSource(*c);
    const int64_t n = c->tokens, H = cfg.hidden, W = cfg.expert_width();
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(cfg, n, /*gate=*/true, 0, cfg.num_experts).ok());
    ASSERT_TRUE(b.LoadHostPartsOf(*source).ok());
    auto cpu = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, n);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    // The frame: the CPU's bits both ways.
    ExpectFrameAsTheCpus(b, (*cpu)->backend(), c->x.data(), n);
    // bf16 rows are widened by the caller: the host's frame reads fp32.
    std::vector<uint16_t> x16(n * H);
    for (int64_t i = 0; i < n * H; ++i) x16[i] = F32ToBf16(c->x[i]);
    Routing bf16_routing;
    auto taken = b.RouteTokensBf16(0, x16.data(), {.n = n}, &bf16_routing);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_FALSE(*taken);
    // The layer through the device host logic.
    LocalMoe moe(&b);
    std::vector<float> y(n * H);
    const int64_t ends[] = {n};
    for (int step = 0; step < 2; ++step) {
      b.counting().counts = Counts();
      Routing routing;
      ASSERT_TRUE(moe.Forward(0, c->x.data(), {.n = n, .segment_ends = ends},
                              y.data(), &routing)
                      .ok());
      const Counts& got = b.counting().counts;
      const int64_t routing_bytes = kRoutingBytesPerSlot * n * cfg.top_k;
      const int64_t shared = cfg.has_shared() ? n * H * 4 : 0;
      const int64_t in = n * H * 4 + n * W * 4 + shared;
      const int64_t out = n * W * 4 + shared;
      EXPECT_GE(got.h2d_bytes, in);
      EXPECT_LE(got.h2d_bytes, in + routing_bytes);
      EXPECT_GE(got.d2h_bytes, out);
      EXPECT_LE(got.d2h_bytes, out + routing_bytes);
      EXPECT_LE(got.syncs, cfg.has_shared() ? 3 : 2);
      EXPECT_EQ(got.allocations, 0);
    }
  }
  EXPECT_GE(checked, 2) << "no LatentMoE golden cases (Nemotron 3, Kimi K3)";
}

// An fp32 vector of the golden case's layer 0.
std::vector<float> CaseVector(const ModelSource& source, WeightRole role) {
  absl::StatusOr<WeightTensor> t = source.Get(0, role, -1);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  absl::StatusOr<WeightValues<float>> v = WeightsAsF32(*t);
  EXPECT_TRUE(v.ok()) << v.status();
  if (!v.ok()) return {};
  return std::vector<float>(v->data, v->data + t->numel());
}

// Gemma 4 on a device router part (P = 0): the routing (router pre-norm,
// per-expert scale) runs on the host with the CPU's TokenRouter and bits,
// the branch norms' frame on the host with the CPU's bits, and the shared
// expert between its own norms, normed on the host. x never goes up for
// the routing: the frame's rows go up once for the step, the pre-normed
// rows once for the shared expert; the experts' sum and the shared expert
// come home once each; a wait at the step's end and one for the shared
// expert.
TEST(CopyBudget, RouterAtP0RoutesGemma4OnTheHostWithTheCpusBits) {
  int checked = 0;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    const MoeLayerConfig& cfg = c->config;
    // Gemma 4's: its router pre-norm with its branch norms.
    if (!cfg.router_prenorm && !cfg.branch_norms) continue;
    SCOPED_TRACE(c->name);
    ASSERT_TRUE(RoutesOnHost(cfg));
    ASSERT_TRUE(cfg.branch_norms && cfg.has_shared());
    ASSERT_TRUE(CheckDeviceLayerMath(cfg, "cuda:0", /*router_part=*/true).ok());
    ++checked;
    auto source = testing::MakeGoldenSource(*c);
    const int64_t n = c->tokens, H = cfg.hidden, W = cfg.expert_width();
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(cfg, n, /*gate=*/true, 0, cfg.num_experts).ok());
    ASSERT_TRUE(b.LoadHostPartsOf(*source).ok());
    auto cpu = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, n);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const int64_t ends[] = {n};
    const RouteRows rows{
        .n = n, .segment_ends = ends, .token_ids = c->token_ids};
    // The routing: the CPU backend's bits, and the case's.
    b.counting().counts = Counts();
    Routing dev, host;
    ASSERT_TRUE(b.RouteTokens(0, c->x.data(), rows, &dev).ok());
    EXPECT_EQ(b.counting().counts.h2d_bytes, 0) << "x went up to be routed";
    EXPECT_EQ(b.counting().counts.syncs, 0) << "the host routing waited";
    ASSERT_TRUE(
        (*cpu)->backend().RouteTokens(0, c->x.data(), rows, &host).ok());
    EXPECT_EQ(dev.expert, host.expert);
    EXPECT_EQ(dev.dispatched, host.dispatched);
    ASSERT_EQ(dev.weight.size(), host.weight.size());
    EXPECT_EQ(std::memcmp(dev.weight.data(), host.weight.data(),
                          dev.weight.size() * 4),
              0);
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, dev.expert,
                                          dev.weight, n, cfg.top_k, dev.slots));
    // The frame (the experts' branch norms): the CPU's bits both ways.
    ExpectFrameAsTheCpus(b, (*cpu)->backend(), c->x.data(), n);
    // The shared expert (the fake's identity) between the host's norms.
    const std::vector<float> in_norm =
        CaseVector(*source, WeightRole::kSharedInNorm);
    const std::vector<float> out_norm =
        CaseVector(*source, WeightRole::kSharedOutNorm);
    ASSERT_EQ(in_norm.size(), static_cast<size_t>(H));
    ASSERT_EQ(out_norm.size(), static_cast<size_t>(H));
    std::vector<float> want(n * H), got(n * H);
    RmsNormRows(c->x.data(), n, H, cfg.norm_eps, in_norm.data(), 1.0f,
                want.data());
    RmsNormRows(want.data(), n, H, cfg.norm_eps, out_norm.data(), 1.0f,
                want.data());
    ASSERT_TRUE(b.Shared(0, c->x.data(), n, got.data()).ok());
    EXPECT_EQ(got, want);
    // bf16 rows are widened by the caller: the host routes fp32 rows.
    std::vector<uint16_t> x16(n * H);
    for (int64_t i = 0; i < n * H; ++i) x16[i] = F32ToBf16(c->x[i]);
    auto taken = b.RouteTokensBf16(0, x16.data(), rows, &dev);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_FALSE(*taken);
    // The layer through the device host logic: the routing is the CPU's.
    LocalMoe moe(&b);
    std::vector<float> y(n * H);
    for (int step = 0; step < 2; ++step) {
      b.counting().counts = Counts();
      Routing routing;
      const absl::Status s =
          moe.Forward(0, c->x.data(), rows, y.data(), &routing);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(routing.expert, host.expert);
      EXPECT_EQ(routing.weight, host.weight);
      const Counts& got_counts = b.counting().counts;
      const int64_t routing_bytes = kRoutingBytesPerSlot * n * cfg.top_k;
      const int64_t in = n * W * 4 + n * H * 4, out = n * W * 4 + n * H * 4;
      EXPECT_GE(got_counts.h2d_bytes, in);
      EXPECT_LE(got_counts.h2d_bytes, in + routing_bytes);
      EXPECT_GE(got_counts.d2h_bytes, out);
      EXPECT_LE(got_counts.d2h_bytes, out + routing_bytes);
      EXPECT_LE(got_counts.syncs, 2);
      EXPECT_EQ(got_counts.allocations, 0);
    }
  }
  EXPECT_GE(checked, 1) << "no Gemma 4 golden case (gemma4_like)";
}

// Gemma 4's router options without its branch norms (no family has them
// so, but a layer may): routed on the host with the CPU's bits, x goes up
// once for the step, which reads it resident, and the shared expert is
// summed on the device: the budget of a device-routed layer, with one
// wait (the step's end) as the host's routing waits for nothing.
TEST(CopyBudget, RouterAtP0RoutesAnUnframedLayerOnTheHostAndSendsXUpOnce) {
  int checked = 0;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    if (!RoutesOnHost(c->config)) continue;
    SCOPED_TRACE(c->name);
    ++checked;
    c->config.branch_norms = false;
    const MoeLayerConfig& cfg = c->config;
    ASSERT_FALSE(cfg.has_expert_frame());
    ASSERT_TRUE(CheckDeviceLayerMath(cfg, "cuda:0", /*router_part=*/true).ok());
    auto source = testing::MakeGoldenSource(*c);
    const int64_t n = c->tokens, H = cfg.hidden;
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(cfg, n, /*gate=*/true, 0, cfg.num_experts).ok());
    ASSERT_TRUE(b.LoadHostPartsOf(*source).ok());
    auto cpu = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 1, n);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const int64_t ends[] = {n};
    const RouteRows rows{
        .n = n, .segment_ends = ends, .token_ids = c->token_ids};
    Routing host;
    ASSERT_TRUE(
        (*cpu)->backend().RouteTokens(0, c->x.data(), rows, &host).ok());
    LocalMoe moe(&b);
    std::vector<float> y(n * H);
    for (int step = 0; step < 2; ++step) {
      b.counting().counts = Counts();
      Routing routing;
      const absl::Status s =
          moe.Forward(0, c->x.data(), rows, y.data(), &routing);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(routing.expert, host.expert);
      EXPECT_EQ(routing.weight, host.weight);
      ExpectBudget(b.counting().counts, n, n * cfg.top_k, H,
                   /*max_syncs=*/1);
      // A zero expert's slot never reaches the device.
      for (size_t i = 0; i < routing.expert.size(); ++i) {
        if (routing.expert[i] >= cfg.num_experts) {
          EXPECT_EQ(routing.dispatched[i], 0);
        }
      }
    }
  }
  // Gemma 4's router options, PhiMoE's sparsemixer and LongCat-Flash's
  // zero experts.
  EXPECT_GE(checked, 3)
      << "expected gemma4_like, phimoe_like and longcat_like to route on "
         "the host";
}

// output_scale and the output bias (Cohere2-MoE, JetMoE) on a device
// router: y comes home once, then the host scales it and adds the host
// copy of the bias, exactly as on the CPU (y * s, then + b), within the
// budget of the layer without them.
TEST(CopyBudget, RouterAtP0AppliesTheOutputTermsOnTheHost) {
  int checked = 0;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    const MoeLayerConfig& cfg = c->config;
    if (cfg.zero_experts > 0 || !HasOutputTerms(cfg)) continue;
    SCOPED_TRACE(c->name);
    ++checked;
    ASSERT_TRUE(CheckDeviceLayerMath(cfg, "cuda:0", /*router_part=*/true).ok());
    testing::GoldenCase plain = *c;
    plain.config.output_scale = 1.0f;
    plain.config.output_bias = false;
    const int64_t n = c->tokens, H = cfg.hidden;
    const int64_t ends[] = {n};
    const RouteRows rows{
        .n = n, .segment_ends = ends, .token_ids = c->token_ids};
    std::vector<float> y(n * H), y_plain(n * H);
    for (const testing::GoldenCase* k : {&*c, &plain}) {
      auto source = testing::MakeGoldenSource(*k);
      FakeDeviceBackend b;
      ASSERT_TRUE(
          b.Init(k->config, n, /*gate=*/true, 0, k->config.num_experts).ok());
      ASSERT_TRUE(b.LoadHostPartsOf(*source).ok());
      EXPECT_EQ(b.OutputBias(0) != nullptr, k->config.output_bias);
      LocalMoe moe(&b);
      b.counting().counts = Counts();
      Routing routing;
      const absl::Status s = moe.Forward(
          0, c->x.data(), rows, (k == &plain ? y_plain : y).data(), &routing);
      ASSERT_TRUE(s.ok()) << s;
      ExpectBudget(b.counting().counts, n, n * cfg.top_k, H,
                   /*max_syncs=*/2);
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        float want = y_plain[t * H + h] * cfg.output_scale;
        if (cfg.output_bias) want += c->output_bias[h];
        ASSERT_EQ(y[t * H + h], want) << "row " << t << ", column " << h;
      }
    }
  }
  EXPECT_GE(checked, 2) << "expected cohere2_like and jetmoe_like";
}

// A reload that fails at any of its points leaves the old layers, config
// and workspaces serving, and a whole one serves the new model: the
// backend's state is taken from a fresh backend only once all of it
// loaded, and the load waits on that backend's own queue, never on the
// serving one's.
TEST(DeviceLoad, AReloadFailingAtAnyPointLeavesTheOldModelServing) {
  std::vector<testing::GoldenCase> cases;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    const MoeLayerConfig& cfg = c->config;
    if (RoutesOnHost(cfg) || cfg.has_expert_frame() || !cfg.has_shared() ||
        !CheckDeviceLayerMath(cfg, "cuda:0", true).ok()) {
      continue;
    }
    if (!cases.empty() && cases[0].config.hidden == cfg.hidden &&
        cases[0].config.num_experts == cfg.num_experts) {
      continue;
    }
    cases.push_back(*std::move(c));
    if (cases.size() == 2) break;
  }
  ASSERT_EQ(cases.size(), 2u) << "two golden cases of different shapes";
  LoadOptions o;
  o.dtype = WeightDType::kF32;
  o.load_gate = o.load_shared = true;
  auto old_source = testing::MakeGoldenSource(cases[0]);
  auto new_source = testing::MakeGoldenSource(cases[1]);
  FakeDeviceBackend b;
  ASSERT_TRUE(b.Load(*old_source, o, cases[0].tokens).ok());
  // A step of `c` on b: its routing (the fake's: token t to experts t, t + 1,
  // ... mod E), within the budget and allocating nothing.
  auto serves = [&](const testing::GoldenCase& c) {
    const MoeLayerConfig& cfg = c.config;
    EXPECT_EQ(b.config().hidden, cfg.hidden);
    EXPECT_EQ(b.config().num_experts, cfg.num_experts);
    EXPECT_EQ(b.max_tokens(), c.tokens);
    LocalMoe moe(&b);
    const int64_t n = c.tokens, ends[] = {n};
    std::vector<float> y(n * cfg.hidden);
    b.counting().counts = Counts();
    Routing routing;
    const absl::Status s = moe.Forward(
        0, c.x.data(), {.n = n, .segment_ends = ends}, y.data(), &routing);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(routing.expert.size(), static_cast<size_t>(n * cfg.top_k));
    for (int64_t t = 0; t < n; ++t) {
      EXPECT_EQ(routing.expert[t * cfg.top_k + 1], (t + 1) % cfg.num_experts);
    }
    ExpectBudget(b.counting().counts, n, n * cfg.top_k, cfg.hidden,
                 /*max_syncs=*/2);
  };
  serves(cases[0]);
  for (LoadPoint p : kLoadPoints) {
    SCOPED_TRACE(LoadPointName(p));
    SetLoadFaultForTest([p](LoadPoint at) {
      return at == p ? absl::ResourceExhaustedError("injected")
                     : absl::OkStatus();
    });
    const int64_t syncs = b.counting().counts.syncs;
    const absl::Status s = b.Load(*new_source, o, cases[1].tokens);
    SetLoadFaultForTest(nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_EQ(b.counting().counts.syncs, syncs)
        << "the load waited on the serving queue";
    serves(cases[0]);
  }
  ASSERT_TRUE(b.Load(*new_source, o, cases[1].tokens).ok());
  serves(cases[1]);
}

// The step runner's order on a router whose experts run on workers: the
// layer is routed on the host (Gemma 4's router options, no expert frame),
// which queues x's upload without a wait, and then, while the workers
// compute and before the step's end, the shared expert runs over a
// sub-range of the rows (a request that skips it). The second upload
// rewrites the pinned staging: it must wait for the first upload first, or
// a GPU's copy may read the sub-range's bytes.
TEST(DeferredQueue, ASharedSubRangeAfterHostRoutingWaitsForTheStaging) {
  int checked = 0;
  for (const std::string& path : testing::GoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    // The hazard needs the shared expert's sub-range after host routing.
    if (!RoutesOnHost(c->config) || !c->config.has_shared()) continue;
    SCOPED_TRACE(c->name);
    ++checked;
    c->config.branch_norms = false;
    const MoeLayerConfig& cfg = c->config;
    ASSERT_FALSE(cfg.has_expert_frame());
    ASSERT_TRUE(cfg.has_shared());
    auto source = testing::MakeGoldenSource(*c);
    const int64_t n = c->tokens, H = cfg.hidden;
    ASSERT_GE(n, 2);
    FakeDeviceBackend b;
    ASSERT_TRUE(b.Init(cfg, n, /*gate=*/true, 0, cfg.num_experts).ok());
    ASSERT_TRUE(b.LoadHostPartsOf(*source).ok());
    const int64_t ends[] = {1, n};
    const RouteRows rows{
        .n = n, .segment_ends = ends, .token_ids = c->token_ids};
    Routing routing;
    ASSERT_TRUE(b.RouteTokens(0, c->x.data(), rows, &routing).ok());
    ASSERT_GT(b.counting().queued(), 0) << "x went up with a wait";
    // Rows [1, n): the fake's shared expert is the identity.
    std::vector<float> out((n - 1) * H);
    ASSERT_TRUE(b.Shared(0, c->x.data() + H, n - 1, out.data()).ok());
    EXPECT_TRUE(b.counting().hazards.empty())
        << absl::StrJoin(b.counting().hazards, "; ");
    EXPECT_EQ(std::memcmp(out.data(), c->x.data() + H, out.size() * 4), 0)
        << "the shared expert read other rows than its own";
    b.counting().hazards.clear();  // reported once
  }
  EXPECT_GE(checked, 1) << "no Gemma 4 golden case (gemma4_like)";
}

// The deferred queue itself: a download's destination reads NaN until the
// wait, an upload reads its staging at the wait, and a rewrite in between
// is a hazard.
TEST(DeferredQueue, AppliesCopiesAtTheWaitAndSeesARewrittenStaging) {
  CountingQueue q;
  auto pin = q.Allocate(DeviceStepQueue::Memory::kPinnedHost, 16);
  auto dev = q.Allocate(DeviceStepQueue::Memory::kDevice, 16);
  ASSERT_TRUE(pin.ok() && dev.ok());
  float* p = static_cast<float*>(pin->get());
  float* d = static_cast<float*>(dev->get());
  for (int i = 0; i < 4; ++i) p[i] = 1.0f + i;
  ASSERT_TRUE(q.CopyFromHost(p, d, 16).ok());
  EXPECT_EQ(d[0], 0.0f) << "copied before the wait";
  ASSERT_TRUE(q.Synchronize().ok());
  EXPECT_EQ(d[3], 4.0f);
  EXPECT_TRUE(std::isnan(p[0])) << "the staging was not poisoned";
  ASSERT_TRUE(q.Download(d, p, 16).ok());
  EXPECT_TRUE(std::isnan(p[2])) << "a download's destination read early";
  ASSERT_TRUE(q.Synchronize().ok());
  EXPECT_EQ(p[2], 3.0f);
  ASSERT_TRUE(q.CopyFromHost(p, d, 16).ok());
  p[1] = 7.0f;  // before the wait
  ASSERT_TRUE(q.Synchronize().ok());
  ASSERT_EQ(q.hazards.size(), 1u);
  EXPECT_NE(q.hazards[0].find("rewritten before the upload was waited on"),
            std::string::npos);
  q.hazards.clear();
}

// A worker of two (P = 2) under a device collective: its rows (of the
// experts' width) up once, its answer home once, one wait (the step's end),
// nothing allocated.
void ExpectWorkerBudgetAtP2(const MoeLayerConfig& c) {
  const int world = 2;
  // The rows a worker gets and answers: the router applied the frame.
  const int64_t H = c.expert_width(), k = c.top_k, E = c.num_experts;
  for (int64_t n : {1, 64, 4096}) {
    SCOPED_TRACE(n);
    Routing routing;
    routing.Reset(n, k, E);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = static_cast<int32_t>((t + j) % E);
        routing.expert[t * k + j] = e;
        routing.weight[t * k + j] = 1.0f / k;
        routing.dispatched[t * k + j] = 1;
        ++routing.expert_counts[e];
      }
    }
    std::vector<int32_t> ids;
    std::vector<int64_t> counts;
    PlanDispatch(routing, n, world, E, &ids, &counts);
    std::vector<float> x(n * H, 0.5f), y(n * H);
    gloo::rendezvous::HashStore store;
    std::vector<absl::Status> status(world);
    std::vector<std::vector<Counts>> got(world);
    auto rank = [&](int r) {
      FakeDeviceBackend b;
      status[r] = b.Init(c, n, /*gate=*/false, SplitBegin(r, world, E),
                         SplitBegin(r + 1, world, E));
      if (!status[r].ok()) return;
      auto gloo = CreateGlooCommunicator(r, world, "127.0.0.1", store,
                                         std::chrono::seconds(30));
      if (!gloo.ok()) {
        status[r] = gloo.status();
        return;
      }
      DeviceGroup comm(*std::move(gloo));
      const int64_t lo = SplitBegin(r, world, n),
                    hi = SplitBegin(r + 1, world, n);
      EpStepInput in;
      in.tokens = hi - lo;
      in.rows = x.data() + lo * H;
      in.slots = k;
      in.expert_ids = absl::MakeConstSpan(ids).subspan(lo * k, (hi - lo) * k);
      in.weights =
          absl::MakeConstSpan(routing.weight).subspan(lo * k, (hi - lo) * k);
      in.counts = counts;
      in.all_expert_ids = ids;
      EpStep step;
      for (int s = 0; s < 2 && status[r].ok(); ++s) {  // the first step too
        b.counting().counts = Counts();
        status[r] =
            step.Run(in, b, comm, {n, false}, y.data() + lo * H, nullptr);
        got[r].push_back(b.counting().counts);
      }
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) threads.emplace_back(rank, r);
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(r);
      ASSERT_TRUE(status[r].ok()) << status[r];
      const int64_t tokens =
          SplitBegin(r + 1, world, n) - SplitBegin(r, world, n);
      for (const Counts& step : got[r]) {
        ExpectBudget(step, tokens, n * k, H, /*max_syncs=*/1);
      }
    }
  }
}

TEST(CopyBudget, WorkerAtP2MovesEachActivationByteOnceEachWay) {
  ExpectWorkerBudgetAtP2(BudgetConfig());
}

// LatentMoE's workers move rows of the latent width, a quarter of H: one
// full-width row more would exceed the budget.
TEST(CopyBudget, LatentNonGatedWorkerAtP2MovesLatentRowsOnly) {
  const MoeLayerConfig c = LatentNonGatedConfig();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  ASSERT_LT(c.expert_width(), c.hidden);
  ASSERT_TRUE(CheckDeviceLayerMath(c, "cuda:0", /*router_part=*/false).ok());
  ExpectWorkerBudgetAtP2(c);
}

// A device backend refuses, by name and at load, the late-2026 options its
// kernels do not compute, so that no layer is served with part of its math
// missing. Its experts (a worker's part) compute every activation of
// kernels/act_rule.h, non-gated and latent-width experts included; its router
// part computes the experts' frames and Gemma 4's routing and shared norms
// (on the host) and refuses only a shared-expert gate under branch norms,
// sending such a model to a CPU router.
MoeLayerConfig SmallConfig() {
  MoeLayerConfig c;
  c.hidden = 64;
  c.inter = 32;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

struct LateOption {
  void (*set)(MoeLayerConfig&);
  const char* named;  // in the refusal of the router part
};
const LateOption kLateOptions[] = {
    {[](MoeLayerConfig& m) {
       m.gated = false;
       m.act = Activation::kRelu2;
     },
     nullptr},  // the router's shared expert runs non-gated too
    {[](MoeLayerConfig& m) { m.act = Activation::kSitu; }, nullptr},
    {[](MoeLayerConfig& m) { m.act = Activation::kGeluTanh; }, nullptr},
    // LatentMoE's frame runs on the host (DeviceBackend::EnterExperts).
    {[](MoeLayerConfig& m) { m.latent = 16; }, nullptr},
    {[](MoeLayerConfig& m) {
       m.latent = 16;
       m.latent_bias = true;
       m.latent_norm = true;
     },
     nullptr},
    // Gemma 4's routing, frame and shared norms run on the host.
    {[](MoeLayerConfig& m) { m.branch_norms = true; }, nullptr},
    {[](MoeLayerConfig& m) { m.router_prenorm = true; }, nullptr},
    {[](MoeLayerConfig& m) { m.per_expert_scale = true; }, nullptr},
    {[](MoeLayerConfig& m) {
       m.branch_norms = true;
       m.router_prenorm = true;
       m.per_expert_scale = true;
       m.shared_inter = 32;
     },
     nullptr},
    // The device's shared expert would gate before the host's post-norm.
    {[](MoeLayerConfig& m) {
       m.branch_norms = true;
       m.shared_inter = 32;
       m.shared_gate = true;
     },
     "shared_gate"},
};

TEST(DeviceLayerMath, WorkersComputeEveryLateExpertForm) {
  for (const LateOption& o : kLateOptions) {
    MoeLayerConfig m = SmallConfig();
    o.set(m);
    ASSERT_TRUE(m.Validate().ok()) << m.Validate();
    EXPECT_TRUE(CheckDeviceExpertMath(m, "cuda:0").ok())
        << CheckDeviceExpertMath(m, "cuda:0");
    EXPECT_TRUE(CheckDeviceLayerMath(m, "cuda:0", /*router_part=*/false).ok());
  }
}

TEST(DeviceLayerMath, RouterPartRefusesWhatItDoesNotComputeByName) {
  for (const LateOption& o : kLateOptions) {
    MoeLayerConfig m = SmallConfig();
    o.set(m);
    const absl::Status s =
        CheckDeviceLayerMath(m, "cuda:0", /*router_part=*/true);
    EXPECT_EQ(s, CheckDeviceRouterMath(m, "cuda:0"));
    if (o.named == nullptr) {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << o.named;
    EXPECT_NE(s.message().find(o.named), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("cuda:0"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("route this model on a CPU router; CUDA "
                               "workers can run its experts"),
              absl::string_view::npos)
        << s;
  }
}

TEST(DeviceLayerMath, NonGatedExpertBiasesAreRefusedOnWorkersToo) {
  MoeLayerConfig m = SmallConfig();
  m.gated = false;
  m.act = Activation::kRelu2;
  m.expert_bias = true;
  for (bool router_part : {false, true}) {
    const absl::Status s = CheckDeviceLayerMath(m, "cuda:0", router_part);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(s.message().find("expert_bias"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("--device cpu"), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace moe
