#include "bench/cuda_bench.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/nccl_communicator.h"
#include "core/cli_args.h"
#include "core/dtype.h"
#include "core/even_split.h"
#include "core/status_macros.h"
#include "engine/cuda/cuda_experts.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/fp8_image.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/row_bucket.h"
#include "engine/device_step_queue.h"
#include "engine/local_moe.h"
#include "gloo/rendezvous/hash_store.h"
#include "kernels/fp8_rule.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

// A stream and two events, released on every path.
class Timer {
 public:
  ~Timer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  absl::Status Init() {
    MOE_CUDA_OK(cudaEventCreate(&start_));
    MOE_CUDA_OK(cudaEventCreate(&stop_));
    return absl::OkStatus();
  }
  // Mean milliseconds of fn() over `reps` calls enqueued on `s`, after two
  // untimed calls (plans cached, clocks up).
  template <typename Fn>
  absl::StatusOr<double> MeanMs(cudaStream_t s, int reps, Fn fn) {
    for (int i = 0; i < 2; ++i) MOE_RETURN_IF_ERROR(fn());
    MOE_CUDA_OK(cudaEventRecord(start_, s));
    for (int i = 0; i < reps; ++i) MOE_RETURN_IF_ERROR(fn());
    MOE_CUDA_OK(cudaEventRecord(stop_, s));
    MOE_CUDA_OK(cudaEventSynchronize(stop_));
    float ms = 0;
    MOE_CUDA_OK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms / reps;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

class Stream {
 public:
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  absl::Status Init() {
    MOE_CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    return absl::OkStatus();
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Device buffers filled from one host pattern of normal bf16 values, each
// from its own offset: gigabytes of expert weights need neither gigabytes
// of host values nor minutes of sampling, and timing does not depend on the
// values (but all-zero inputs would flatter the tensor cores' power draw).
class PatternUploader {
 public:
  explicit PatternUploader(uint64_t seed, float stddev) : host_(kPattern) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, stddev);
    for (auto& v : host_) v = F32ToBf16(normal(rng));
  }
  absl::StatusOr<DeviceBuffer> Upload(int64_t count, int64_t offset) {
    MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(count * 2));
    int64_t done = 0;
    int64_t from = offset % kPattern;
    while (done < count) {
      const int64_t len = std::min(count - done, kPattern - from);
      MOE_CUDA_OK(cudaMemcpy(b.as<uint16_t>() + done, host_.data() + from,
                             len * 2, cudaMemcpyHostToDevice));
      done += len;
      from = 0;
    }
    return b;
  }

 private:
  static constexpr int64_t kPattern = int64_t{1} << 22;
  std::vector<uint16_t> host_;
};

// E4M3 bytes from one host pattern (finite codes of magnitude up to 1, both
// signs; no NaN), as PatternUploader does for bf16.
absl::StatusOr<DeviceBuffer> UploadFp8Pattern(int64_t bytes, uint64_t seed) {
  static constexpr int64_t kPattern = int64_t{1} << 22;
  std::vector<uint8_t> host(kPattern);
  std::mt19937_64 rng(seed);
  for (auto& c : host) c = static_cast<uint8_t>(rng() & 0xb7);  // exp <= 6
  MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  for (int64_t done = 0; done < bytes; done += kPattern) {
    MOE_CUDA_OK(cudaMemcpy(b.as<uint8_t>() + done, host.data(),
                           std::min(kPattern, bytes - done),
                           cudaMemcpyHostToDevice));
  }
  return b;
}

absl::StatusOr<DeviceBuffer> UploadScales(int64_t count, float value) {
  std::vector<float> host(count, value);
  MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(count * 4));
  MOE_CUDA_OK(
      cudaMemcpy(b.data(), host.data(), count * 4, cudaMemcpyHostToDevice));
  return b;
}

// Mean ms of the engine's block-scaled FP8 pass (engine/cuda/cuda_experts.h)
// over the same bf16 rows and offsets: E4M3 experts in the device form of
// engine/cuda/fp8_image.h, activations quantised per row per 128 channels
// inside the pass. FAILED_PRECONDITION off sm_90.
absl::StatusOr<double> TimeFp8Experts(const ExpertsBenchArgs& a,
                                      const std::vector<int64_t>& offsets,
                                      const DeviceBuffer& in, LtMatmul& lt,
                                      cudaStream_t stream, Timer& timer) {
  const int64_t H = a.hidden, I = a.inter, E = a.experts;
  cudaDeviceProp prop;
  MOE_CUDA_OK(cudaGetDeviceProperties(&prop, a.device));
  const Fp8PathChoice choice = ChooseFp8GpuPath(prop.major, prop.minor, H, E);
  if (choice.path != Fp8GpuPath::kBlockScaled) {
    return absl::FailedPreconditionError(
        absl::StrCat("--weight-dtype fp8 --experts-only times block-scaled "
                     "FP8 experts, which this device cannot run: ",
                     choice.reason));
  }
  const int64_t Hk = Fp8Pad(H), Ip = Fp8InterPad(I), Ik = Fp8DownK(I);
  std::vector<CudaExpert> experts(E);
  std::vector<const CudaExpert*> ptrs;
  for (int64_t e = 0; e < E; ++e) {
    CudaExpert& x = experts[e];
    x.fp8 = true;
    x.inter = I;
    x.hidden_k = Hk;
    x.inter_pad = Ip;
    x.down_k = Ik;
    MOE_ASSIGN_OR_RETURN(x.w13, UploadFp8Pattern(2 * Ip * Hk, a.seed + 3 * e));
    MOE_ASSIGN_OR_RETURN(x.w2, UploadFp8Pattern(H * Ik, a.seed + 3 * e + 1));
    // Codes up to 1 times 0.02: weights of the bf16 pattern's size.
    MOE_ASSIGN_OR_RETURN(
        x.w13_scale,
        UploadScales(kernels::Fp8WeightScaleFloats(2 * Ip, Hk), 0.02f));
    MOE_ASSIGN_OR_RETURN(
        x.w2_scale, UploadScales(kernels::Fp8WeightScaleFloats(H, Ik), 0.02f));
    ptrs.push_back(&x);
  }
  CudaExpertsOptions o;
  o.fp8 = true;
  o.max_graph_rows = 0;  // timed as the bf16 paths are, without graphs
  MOE_ASSIGN_OR_RETURN(auto pass, CudaExperts::Create(a.rows, H, I, E, o));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer out,
                       DeviceBuffer::Allocate(a.rows * H * 2));
  return timer.MeanMs(stream, a.reps, [&] {
    return pass->Run(lt, ptrs, offsets, in.as<uint16_t>(), out.data(),
                     /*out_f32=*/false, stream);
  });
}

// TFLOP/s of the dense D [m, n] = X [m, k] W [n, k]^T in bf16 with fp32
// accumulation: the reference every MoE figure is divided by.
absl::StatusOr<double> DenseGemmTflops(LtMatmul& lt, int64_t m, int64_t n,
                                       int64_t k, int reps, cudaStream_t s) {
  PatternUploader pattern(/*seed=*/7, /*stddev=*/0.05f);
  MOE_ASSIGN_OR_RETURN(DeviceBuffer x, pattern.Upload(m * k, 0));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer w, pattern.Upload(n * k, 12345));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(m * n * 2));
  Timer timer;
  MOE_RETURN_IF_ERROR(timer.Init());
  MOE_ASSIGN_OR_RETURN(double ms, timer.MeanMs(s, reps, [&] {
    return lt.Run(m, n, k, x.data(), w.data(), d.data(), CUDA_R_16BF,
                  CUDA_R_16BF, s);
  }));
  return 2.0 * m * n * k / (ms * 1e-3) / 1e12;
}

absl::Status CheckDevice(int device) {
  MOE_RETURN_IF_ERROR(CudaDeviceAvailable(device));
  MOE_CUDA_OK(cudaSetDevice(device));
  return absl::OkStatus();
}

std::string DeviceName(int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown";
  return p.name;
}

// What the timed steps of RunCudaLayer add up to.
struct LayerSteps {
  std::vector<double> seconds;  // of each timed step
  StageTimes mean;
  double flops = 0;
  int64_t allocations = 0;  // device allocations in the timed steps
  // Per timed step: bytes each way between host and device, host waits.
  double h2d_bytes = 0, d2h_bytes = 0, syncs = 0;
  // The same bytes copied alone between pinned and device memory, each way
  // (mean ms).
  double h2d_ms = 0, d2h_ms = 0;
};

// `reps` timed steps of n synthetic tokens, after two warm-up steps.
absl::StatusOr<LayerSteps> TimeLayerSteps(LocalMoe& moe,
                                          const SyntheticSpec& spec, int64_t n,
                                          int reps) {
  const MoeLayerConfig& c = spec.layer;
  const int64_t H = c.hidden;
  std::vector<float> x(n * H), y(n * H);
  Routing routing;
  LayerSteps s;
  auto* device = dynamic_cast<DeviceStepQueue*>(&moe.backend().queue());
  DeviceStepQueue::Traffic before_steps;
  for (int r = 0; r < reps + 2; ++r) {  // two warm-up steps
    if (r == 2 && device != nullptr) before_steps = device->traffic();
    FillSyntheticInput(spec.seed + 1 + r, n * H, x.data());
    StageTimes t;
    const int64_t before = DeviceAllocationCount();
    MOE_RETURN_IF_ERROR(
        moe.Forward(0, x.data(), {.n = n}, y.data(), &routing, {.times = &t}));
    if (r < 2) continue;
    s.allocations += DeviceAllocationCount() - before;
    s.seconds.push_back(t.total_us / 1e6);
    s.mean.route_us += t.route_us / reps;
    s.mean.plan_us += t.plan_us / reps;
    s.mean.experts_us += t.experts_us / reps;
    s.mean.combine_us += t.combine_us / reps;
    s.mean.shared_us += t.shared_us / reps;
    int64_t slots = 0;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      slots += routing.expert_counts[e];
    }
    s.flops += 6.0 * H * c.inter * slots + 6.0 * H * c.shared_inter * n +
               2.0 * H * c.num_experts * n;
  }
  if (device != nullptr) {
    const DeviceStepQueue::Traffic t = device->traffic();
    s.h2d_bytes = double(t.h2d_bytes - before_steps.h2d_bytes) / reps;
    s.d2h_bytes = double(t.d2h_bytes - before_steps.d2h_bytes) / reps;
    s.syncs = double(t.syncs - before_steps.syncs) / reps;
  }
  return s;
}

// What the step's copies cost without the layer around them: its bytes each
// way, copied alone between pinned host memory and the device.
absl::Status TimeCopiesAlone(LayerSteps& s, int reps, cudaStream_t stream) {
  const size_t up = static_cast<size_t>(s.h2d_bytes),
               down = static_cast<size_t>(s.d2h_bytes);
  MOE_ASSIGN_OR_RETURN(PinnedBuffer host,
                       PinnedBuffer::Allocate(std::max(up, down)));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer dev,
                       DeviceBuffer::Allocate(std::max(up, down)));
  Timer timer;
  MOE_RETURN_IF_ERROR(timer.Init());
  auto copy = [&](void* dst, const void* src, size_t bytes,
                  cudaMemcpyKind kind) -> absl::Status {
    if (bytes > 0) {
      MOE_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    }
    return absl::OkStatus();
  };
  MOE_ASSIGN_OR_RETURN(s.h2d_ms, timer.MeanMs(stream, reps, [&] {
    return copy(dev.data(), host.data(), up, cudaMemcpyHostToDevice);
  }));
  MOE_ASSIGN_OR_RETURN(s.d2h_ms, timer.MeanMs(stream, reps, [&] {
    return copy(host.data(), dev.data(), down, cudaMemcpyDeviceToHost);
  }));
  return absl::OkStatus();
}

// RunCudaLayer's lines and JSON; `s.seconds` sorted.
void PrintLayerReport(const MoeLayerConfig& c, int device, int64_t n, int reps,
                      const LayerSteps& s, double tflops, int64_t dense_n,
                      double dense) {
  const int64_t H = c.hidden;
  const std::vector<double>& seconds = s.seconds;
  std::printf(
      "layer H=%ld I=%ld E=%ld k=%ld shared=%ld N=%ld weights=bf16 "
      "device=cuda:%d (%s)\n",
      static_cast<long>(H), static_cast<long>(c.inter),
      static_cast<long>(c.num_experts), static_cast<long>(c.top_k),
      static_cast<long>(c.shared_inter), static_cast<long>(n), device,
      DeviceName(device).c_str());
  std::printf("step median %.3f ms over %d reps (min %.3f, max %.3f)\n",
              seconds[seconds.size() / 2] * 1e3, reps, seconds.front() * 1e3,
              seconds.back() * 1e3);
  std::printf(
      "stages (mean us): route %.0f plan %.0f experts %.0f combine %.0f "
      "shared %.0f; device allocations in timed steps: %ld\n",
      s.mean.route_us, s.mean.plan_us, s.mean.experts_us, s.mean.combine_us,
      s.mean.shared_us, static_cast<long>(s.allocations));
  std::printf(
      "%.2f TFLOP/s host to host (%.0f%% of dense cuBLASLt bf16 GEMM "
      "[%ld x %ld x %ld] %.2f TFLOP/s)\n",
      tflops, 100 * tflops / dense, static_cast<long>(n),
      static_cast<long>(dense_n), static_cast<long>(H), dense);
  std::printf(
      "copies per step: host to device %.3f MB, device to host %.3f MB, %.1f "
      "host waits; the same bytes copied alone (pinned): up %.3f ms, down "
      "%.3f ms\n",
      s.h2d_bytes / 1e6, s.d2h_bytes / 1e6, s.syncs, s.h2d_ms, s.d2h_ms);
  nlohmann::json j = {{"device", absl::StrCat("cuda:", device)},
                      {"gpu", DeviceName(device)},
                      {"hidden", H},
                      {"inter", c.inter},
                      {"experts", c.num_experts},
                      {"top_k", c.top_k},
                      {"shared_inter", c.shared_inter},
                      {"tokens", n},
                      {"reps", reps},
                      {"step_ms", seconds[seconds.size() / 2] * 1e3},
                      {"tflops", tflops},
                      {"ref_dense_tflops", dense},
                      {"tflops_vs_dense", tflops / dense},
                      {"step_allocations", s.allocations},
                      {"h2d_bytes", s.h2d_bytes},
                      {"d2h_bytes", s.d2h_bytes},
                      {"host_waits", s.syncs},
                      {"h2d_copy_ms", s.h2d_ms},
                      {"d2h_copy_ms", s.d2h_ms}};
  std::printf("%s\n", j.dump().c_str());
}

// E bf16 experts of the pattern's values, and pointers to them.
absl::Status UploadBf16Experts(const ExpertsBenchArgs& a,
                               std::vector<CudaExpert>& experts,
                               std::vector<const CudaExpert*>& ptrs) {
  const int64_t H = a.hidden, I = a.inter, E = a.experts;
  PatternUploader pattern(a.seed, /*stddev=*/0.02f);
  experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    experts[e].inter = I;
    MOE_ASSIGN_OR_RETURN(experts[e].w13, pattern.Upload(2 * I * H, 3 * e));
    MOE_ASSIGN_OR_RETURN(experts[e].w2, pattern.Upload(H * I, 3 * e + 1));
    ptrs.push_back(&experts[e]);
  }
  return absl::OkStatus();
}

// Rows routed to experts uniformly at random: the per-expert sizes vary
// as they do in a real batch.
std::vector<int64_t> RandomOffsets(uint64_t seed, int64_t E, int64_t rows) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, E - 1);
  std::vector<int64_t> offsets(E + 1, 0);
  for (int64_t r = 0; r < rows; ++r) ++offsets[pick(rng) + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  return offsets;
}

// The bf16 pass's times on each GEMM path and as the engine runs it.
struct ExpertsTimes {
  double loop_ms = 0, grouped_ms = -1, ms = 0;
  std::string chosen = "loop";
  bool graphed = false;
  int64_t allocations = -1;  // most device allocations of one pass
};

absl::StatusOr<ExpertsTimes> TimeBf16Experts(
    CudaExperts& swiglu, LtMatmul& lt,
    const std::vector<const CudaExpert*>& ptrs,
    const std::vector<int64_t>& offsets, const DeviceBuffer& in,
    const DeviceBuffer& out, int64_t rows, int reps, cudaStream_t stream,
    Timer& timer) {
  ExpertsTimes x;
  auto pass = [&] {
    const int64_t before = DeviceAllocationCount();
    absl::Status s = swiglu.Run(lt, ptrs, offsets, in.as<uint16_t>(),
                                out.data(), /*out_f32=*/false, stream);
    x.allocations = std::max(x.allocations, DeviceAllocationCount() - before);
    return s;
  };
  // Both GEMM paths forced, without graphs; then what the engine does: the
  // bucket timed both ways at first use, the faster kept, and at decode
  // sizes (rows <= CudaExpertsOptions::max_graph_rows) the repeating shape
  // replayed as a graph.
  const int64_t graph_rows = CudaExpertsOptions().max_graph_rows;
  swiglu.set_max_graph_rows(0);
  swiglu.set_gemm_mode(GemmPathTable::Mode::kLoop);
  MOE_ASSIGN_OR_RETURN(x.loop_ms, timer.MeanMs(stream, reps, pass));
  if (swiglu.grouped_available()) {
    swiglu.set_gemm_mode(GemmPathTable::Mode::kGrouped);
    MOE_ASSIGN_OR_RETURN(x.grouped_ms, timer.MeanMs(stream, reps, pass));
    if (!swiglu.grouped_available()) x.grouped_ms = -1;  // it failed
  }
  swiglu.set_gemm_mode(GemmPathTable::Mode::kAuto);
  swiglu.set_max_graph_rows(graph_rows);
  // The bucket's measurement, then the shape's first sighting; the timer's
  // untimed passes then capture and replay once.
  for (int i = 0; i < 2; ++i) MOE_RETURN_IF_ERROR(pass());
  MOE_ASSIGN_OR_RETURN(x.ms, timer.MeanMs(stream, reps, pass));
  const GemmPathTable paths = swiglu.gemm_paths();
  for (const GemmPathChoice& c : paths.choices()) {
    if (c.bucket == RowBucket(rows, rows)) x.chosen = GemmPathName(c.chosen);
  }
  x.graphed = swiglu.graph_stats().replays > 0;
  return x;
}

// RunCudaExperts's lines; its JSON, printed by the caller.
nlohmann::json ReportExperts(const ExpertsBenchArgs& a,
                             const std::vector<int64_t>& offsets,
                             const ExpertsTimes& x, double tflops, double dense,
                             size_t cached_plans) {
  const int64_t H = a.hidden, I = a.inter, E = a.experts, rows = a.rows;
  int64_t min_rows = rows, max_rows = 0;
  for (int64_t e = 0; e < E; ++e) {
    min_rows = std::min(min_rows, offsets[e + 1] - offsets[e]);
    max_rows = std::max(max_rows, offsets[e + 1] - offsets[e]);
  }
  std::printf(
      "grouped SwiGLU H=%ld I=%ld E=%ld rows=%ld (%ld..%ld per expert) "
      "device=cuda:%d (%s)\n",
      static_cast<long>(H), static_cast<long>(I), static_cast<long>(E),
      static_cast<long>(rows), static_cast<long>(min_rows),
      static_cast<long>(max_rows), a.device, DeviceName(a.device).c_str());
  const std::string grouped_text =
      x.grouped_ms < 0 ? std::string("unavailable")
                       : absl::StrFormat("%.3f ms", x.grouped_ms);
  std::printf(
      "per-expert cuBLASLt loop %.3f ms; cublasGemmGroupedBatchedEx %s; "
      "engine (%s%s) %.3f ms\n",
      x.loop_ms, grouped_text.c_str(), x.chosen.c_str(),
      x.graphed ? ", graph replay" : "", x.ms);
  std::printf(
      "%.3f ms, %.2f TFLOP/s = %.0f%% of dense cuBLASLt bf16 GEMM "
      "[%ld x %ld x %ld] %.2f TFLOP/s; %zu cached plans; device allocations "
      "per step: %ld\n",
      x.ms, tflops, 100 * tflops / dense, static_cast<long>(rows),
      static_cast<long>(3 * I), static_cast<long>(H), dense, cached_plans,
      static_cast<long>(x.allocations));
  return {{"device", absl::StrCat("cuda:", a.device)},
          {"gpu", DeviceName(a.device)},
          {"hidden", H},
          {"inter", I},
          {"experts", E},
          {"rows", rows},
          {"step_ms", x.ms},
          {"loop_ms", x.loop_ms},
          {"grouped_ms", x.grouped_ms},
          {"chosen", x.chosen},
          {"graph_replay", x.graphed},
          {"tflops", tflops},
          {"ref_dense_tflops", dense},
          {"tflops_vs_dense", tflops / dense},
          {"step_allocations", x.allocations}};
}

// --weight-dtype fp8: the block-scaled FP8 pass against the bf16 grouped
// GEMM (or the engine's pass where grouped is unavailable), into `j`.
absl::Status AddFp8Experts(const ExpertsBenchArgs& a,
                           const std::vector<int64_t>& offsets,
                           const DeviceBuffer& in, LtMatmul& lt,
                           cudaStream_t stream, Timer& timer,
                           const ExpertsTimes& x, nlohmann::json& j) {
  MOE_ASSIGN_OR_RETURN(double fp8_ms,
                       TimeFp8Experts(a, offsets, in, lt, stream, timer));
  const bool vs_grouped = x.grouped_ms > 0;
  const double base_ms = vs_grouped ? x.grouped_ms : x.ms;
  const double fp8_tflops =
      6.0 * a.hidden * a.inter * a.rows / (fp8_ms * 1e-3) / 1e12;
  std::printf(
      "FP8 block-scaled experts (E4M3 weights and activations, per-expert "
      "cuBLASLt) %.3f ms, %.2f TFLOP/s: %.2fx the bf16 %s (%.3f ms)\n",
      fp8_ms, fp8_tflops, base_ms / fp8_ms,
      vs_grouped ? "grouped GEMM" : "engine pass", base_ms);
  j["fp8_ms"] = fp8_ms;
  j["fp8_tflops"] = fp8_tflops;
  j["fp8_speedup_vs_bf16"] = base_ms / fp8_ms;
  j["fp8_baseline"] = vs_grouped ? "bf16_grouped" : "bf16_engine";
  return absl::OkStatus();
}

}  // namespace

absl::Status RunCudaLayer(const SyntheticSpec& spec, int device, int64_t tokens,
                          int reps) {
  if (tokens < 1 || reps < 1) {
    return absl::InvalidArgumentError(
        "--device cuda needs --tokens >= 1 and --reps >= 1");
  }
  MOE_RETURN_IF_ERROR(CheckDevice(device));
  const int64_t H = spec.layer.hidden, n = tokens;
  MOE_ASSIGN_OR_RETURN(auto model, MakeSyntheticModel(spec));
  MOE_ASSIGN_OR_RETURN(
      auto moe, LocalMoe::Create(*model, absl::StrCat("cuda:", device),
                                 WeightDType::kBF16, ThreadsOrAllCores(0), n));
  MOE_ASSIGN_OR_RETURN(LayerSteps steps, TimeLayerSteps(*moe, spec, n, reps));
  const double total =
      std::accumulate(steps.seconds.begin(), steps.seconds.end(), 0.0);
  std::sort(steps.seconds.begin(), steps.seconds.end());
  const double tflops = steps.flops / total / 1e12;
  // The dense GEMM with the same FLOPs per step at the same M (tokens):
  // N = FLOPs / (2 M K), rounded up to a multiple of 64.
  const int64_t dense_n =
      (static_cast<int64_t>(steps.flops / reps / (2.0 * n * H)) + 63) / 64 * 64;
  MOE_ASSIGN_OR_RETURN(auto lt, LtMatmul::Create());
  Stream stream;
  MOE_RETURN_IF_ERROR(stream.Init());
  MOE_ASSIGN_OR_RETURN(double dense,
                       DenseGemmTflops(*lt, n, dense_n, H, reps, stream.get()));
  MOE_RETURN_IF_ERROR(TimeCopiesAlone(steps, reps, stream.get()));
  PrintLayerReport(spec.layer, device, n, reps, steps, tflops, dense_n, dense);
  return absl::OkStatus();
}

absl::Status RunCudaExperts(const ExpertsBenchArgs& a) {
  if (a.hidden < 1 || a.inter < 1 || a.experts < 1 || a.rows < 1 ||
      a.reps < 1) {
    return absl::InvalidArgumentError(
        "--experts-only needs positive --hidden, --inter, --experts, --tokens "
        "(routed rows) and --reps");
  }
  MOE_RETURN_IF_ERROR(CheckDevice(a.device));
  const int64_t H = a.hidden, I = a.inter, E = a.experts, rows = a.rows;
  std::vector<CudaExpert> experts;
  std::vector<const CudaExpert*> ptrs;
  MOE_RETURN_IF_ERROR(UploadBf16Experts(a, experts, ptrs));
  const std::vector<int64_t> offsets = RandomOffsets(a.seed, E, rows);
  PatternUploader inputs(a.seed + 1, /*stddev=*/1.0f);
  MOE_ASSIGN_OR_RETURN(DeviceBuffer in, inputs.Upload(rows * H, 0));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::Allocate(rows * H * 2));
  MOE_ASSIGN_OR_RETURN(auto swiglu, CudaExperts::Create(rows, H, I, E));
  MOE_ASSIGN_OR_RETURN(auto lt, LtMatmul::Create());
  Stream stream;
  MOE_RETURN_IF_ERROR(stream.Init());
  Timer timer;
  MOE_RETURN_IF_ERROR(timer.Init());
  MOE_ASSIGN_OR_RETURN(ExpertsTimes x,
                       TimeBf16Experts(*swiglu, *lt, ptrs, offsets, in, out,
                                       rows, a.reps, stream.get(), timer));
  const double tflops = 6.0 * H * I * rows / (x.ms * 1e-3) / 1e12;
  // Same FLOPs as one dense GEMM: [rows, H] x [3I, H]^T.
  MOE_ASSIGN_OR_RETURN(
      double dense, DenseGemmTflops(*lt, rows, 3 * I, H, a.reps, stream.get()));
  nlohmann::json j =
      ReportExperts(a, offsets, x, tflops, dense, lt->cached_plans());
  if (a.fp8) {
    MOE_RETURN_IF_ERROR(
        AddFp8Experts(a, offsets, in, *lt, stream.get(), timer, x, j));
  }
  std::printf("%s\n", j.dump().c_str());
  return absl::OkStatus();
}

namespace {

struct RankResult {
  absl::Status status;
  double dispatch_ms = 0, combine_ms = 0, plain_ms = 0;
  double dispatch_bytes = 0, combine_bytes = 0, plain_bytes = 0;
};

absl::Status RunRank(int rank, int world, const CollectiveBenchArgs& a,
                     gloo::rendezvous::Store& store, ncclComm_t plain_comm,
                     const std::vector<std::vector<int64_t>>& rows,
                     RankResult* result) {
  const int64_t H = a.hidden;
  MOE_CUDA_OK(cudaSetDevice(rank));
  MOE_ASSIGN_OR_RETURN(auto comm,
                       CreateNcclCommunicator(rank, world, store, rank,
                                              std::chrono::seconds(120)));
  std::vector<int64_t> send(world), recv(world);
  int64_t sent = 0, received = 0;
  for (int q = 0; q < world; ++q) {
    send[q] = rows[rank][q] * H;
    recv[q] = rows[q][rank] * H;
    sent += send[q];
    received += recv[q];
  }
  // The plain all-to-all moves the same number of elements, split evenly.
  const int64_t per_peer = sent / world;
  PatternUploader pattern(a.seed + rank, 1.0f);
  MOE_ASSIGN_OR_RETURN(DeviceBuffer a_buf, pattern.Upload(sent, 0));
  MOE_ASSIGN_OR_RETURN(DeviceBuffer b_buf,
                       DeviceBuffer::Allocate(std::max(received, sent) * 2));
  Stream stream;
  MOE_RETURN_IF_ERROR(stream.Init());
  cudaEvent_t ev[3] = {};
  for (auto& e : ev) MOE_CUDA_OK(cudaEventCreate(&e));
  absl::Status status;
  const auto timeout = std::chrono::seconds(60);
  for (int r = 0; r < a.reps + 2 && status.ok(); ++r) {
    const bool timed = r >= 2;
    status = [&]() -> absl::Status {
      MOE_CUDA_OK(cudaEventRecord(ev[0], stream.get()));
      // Dispatch: rows to the experts' owners; combine: results back.
      MOE_RETURN_IF_ERROR(comm->AllToAllV(a_buf.data(), send, b_buf.data(),
                                          recv, ElementType::kBF16, timeout,
                                          stream.get()));
      MOE_CUDA_OK(cudaEventRecord(ev[1], stream.get()));
      MOE_RETURN_IF_ERROR(comm->AllToAllV(b_buf.data(), recv, a_buf.data(),
                                          send, ElementType::kBF16, timeout,
                                          stream.get()));
      MOE_CUDA_OK(cudaEventRecord(ev[2], stream.get()));
      MOE_RETURN_IF_ERROR(
          comm->Await(ev[2], std::chrono::steady_clock::now() + timeout));
      if (!timed) return absl::OkStatus();
      float ms = 0;
      MOE_CUDA_OK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      result->dispatch_ms += ms / a.reps;
      MOE_CUDA_OK(cudaEventElapsedTime(&ms, ev[1], ev[2]));
      result->combine_ms += ms / a.reps;
      return absl::OkStatus();
    }();
  }
  for (int r = 0; r < a.reps + 2 && status.ok(); ++r) {
    status = [&]() -> absl::Status {
      MOE_CUDA_OK(cudaEventRecord(ev[0], stream.get()));
      if (ncclResult_t n = ncclAlltoAll(a_buf.data(), b_buf.data(), per_peer,
                                        ncclBfloat16, plain_comm, stream.get());
          n != ncclSuccess) {
        return absl::InternalError(
            absl::StrCat("ncclAlltoAll: ", ncclGetErrorString(n)));
      }
      MOE_CUDA_OK(cudaEventRecord(ev[1], stream.get()));
      MOE_CUDA_OK(cudaEventSynchronize(ev[1]));
      if (r < 2) return absl::OkStatus();
      float ms = 0;
      MOE_CUDA_OK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      result->plain_ms += ms / a.reps;
      return absl::OkStatus();
    }();
  }
  for (auto& e : ev) cudaEventDestroy(e);
  result->dispatch_bytes = sent * 2.0;
  result->combine_bytes = received * 2.0;
  result->plain_bytes = per_peer * world * 2.0;
  return status;
}

// Every rank's tokens pick top_k distinct experts uniformly at random;
// rows[r][q] = slots rank r dispatches to rank q.
std::vector<std::vector<int64_t>> RandomRankRows(const CollectiveBenchArgs& a,
                                                 int G) {
  std::vector<std::vector<int64_t>> rows(G, std::vector<int64_t>(G, 0));
  std::mt19937_64 rng(a.seed);
  std::vector<int64_t> perm(a.experts);
  for (int r = 0; r < G; ++r) {
    for (int64_t t = 0; t < a.tokens; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t s = 0; s < a.top_k; ++s) {
        std::uniform_int_distribution<int64_t> pick(s, a.experts - 1);
        std::swap(perm[s], perm[pick(rng)]);
        ++rows[r][SplitOwner(perm[s], G, a.experts)];
      }
    }
  }
  return rows;
}

// One thread per rank, each on its own device, beside a plain NCCL
// communicator over the same devices; the first rank's failure, if any.
absl::Status RunRanks(const CollectiveBenchArgs& a, int G,
                      const std::vector<std::vector<int64_t>>& rows,
                      std::vector<RankResult>& results) {
  std::vector<int> devices(G);
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<ncclComm_t> plain(G, nullptr);
  if (ncclResult_t n = ncclCommInitAll(plain.data(), G, devices.data());
      n != ncclSuccess) {
    return absl::UnavailableError(
        absl::StrCat("ncclCommInitAll: ", ncclGetErrorString(n)));
  }
  gloo::rendezvous::HashStore store;
  results.resize(G);
  std::vector<std::thread> threads;
  for (int r = 0; r < G; ++r) {
    threads.emplace_back([&, r] {
      results[r].status = RunRank(r, G, a, store, plain[r], rows, &results[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (ncclComm_t c : plain) ncclCommDestroy(c);
  for (const RankResult& r : results) {
    if (!r.status.ok()) return r.status;
  }
  return absl::OkStatus();
}

// RunCudaCollective's lines and JSON.
void ReportCollective(const CollectiveBenchArgs& a, int G,
                      const std::vector<RankResult>& results) {
  // Per-rank algorithm bandwidth (bytes a rank sends / time), averaged;
  // bus bandwidth scales it by (G-1)/G as nccl-tests does for all-to-all.
  double dispatch = 0, combine = 0, plain_bw = 0;
  for (const RankResult& r : results) {
    dispatch += r.dispatch_bytes / (r.dispatch_ms * 1e6) / G;
    combine += r.combine_bytes / (r.combine_ms * 1e6) / G;
    plain_bw += r.plain_bytes / (r.plain_ms * 1e6) / G;
  }
  const double bus = (G - 1.0) / G;
  std::printf(
      "all-to-all over %d GPUs (%s): %ld tokens/rank x top-%ld of %ld experts "
      "x H=%ld bf16, %.1f MB sent per rank\n",
      G, DeviceName(0).c_str(), static_cast<long>(a.tokens),
      static_cast<long>(a.top_k), static_cast<long>(a.experts),
      static_cast<long>(a.hidden), results[0].dispatch_bytes / 1e6);
  std::printf(
      "dispatch %.1f GB/s (bus %.1f), combine %.1f GB/s (bus %.1f), NCCL "
      "ncclAlltoAll on the same buffers %.1f GB/s (bus %.1f): dispatch at "
      "%.0f%%, combine at %.0f%%\n",
      dispatch, dispatch * bus, combine, combine * bus, plain_bw,
      plain_bw * bus, 100 * dispatch / plain_bw, 100 * combine / plain_bw);
  nlohmann::json j = {{"gpus", G},
                      {"gpu", DeviceName(0)},
                      {"tokens_per_rank", a.tokens},
                      {"top_k", a.top_k},
                      {"experts", a.experts},
                      {"hidden", a.hidden},
                      {"dispatch_gbps", dispatch},
                      {"combine_gbps", combine},
                      {"ref_alltoall_gbps", plain_bw},
                      {"dispatch_vs_alltoall", dispatch / plain_bw},
                      {"combine_vs_alltoall", combine / plain_bw}};
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

absl::Status RunCudaCollective(const CollectiveBenchArgs& a) {
  const int visible = CudaDeviceCount();
  const int G = a.gpus > 0 ? a.gpus : visible;
  if (G < 2 || G > visible) {
    return absl::FailedPreconditionError(
        absl::StrCat("the collective benchmark needs 2 or more CUDA devices "
                     "(asked for ",
                     G, ", ", visible, " visible)"));
  }
  if (a.tokens < 1 || a.hidden < 1 || a.top_k < 1 || a.top_k > a.experts ||
      a.experts < G || a.reps < 1) {
    return absl::InvalidArgumentError(
        "--collective needs --tokens >= 1, 1 <= --top-k <= --experts, "
        "--experts >= GPUs and --reps >= 1");
  }
  const std::vector<std::vector<int64_t>> rows = RandomRankRows(a, G);
  std::vector<RankResult> results;
  MOE_RETURN_IF_ERROR(RunRanks(a, G, rows, results));
  ReportCollective(a, G, results);
  return absl::OkStatus();
}

}  // namespace moe::bench
