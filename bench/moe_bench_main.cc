// moe-bench: runs one MoE layer of a checkpoint on an input file, or times
// a synthetic layer against the machine's own sgemm and read references.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/fma_peak.h"
#include "bench/references.h"
#include "core/flag_help.h"
#ifdef MOE_HAVE_CUDA
#include "bench/cuda_bench.h"
#endif
#include "core/cli_args.h"
#include "core/device_spec.h"
#include "core/hf_checkpoint.h"
#include "core/process_memory.h"
#include "core/safetensors.h"
#include "core/status_macros.h"
#include "core/synthetic_model.h"
#include "core/tensor_io.h"
#include "engine/cpu_backend.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "kernels/cpu/packed_gemm.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
ABSL_FLAG(int64_t, layer, -1, "MoE layer to run (--model)");
ABSL_FLAG(std::string, input, "", "safetensors file holding x [N, H]");
ABSL_FLAG(std::string, input_tensor, "x", "name of the input tensor");
ABSL_FLAG(std::string, output, "", "safetensors file to write y [N, H] to");
ABSL_FLAG(bool, routing, false, "also write top_idx and top_w");
ABSL_FLAG(bool, synthetic, false, "time a synthetic layer");
ABSL_FLAG(int64_t, hidden, 2048, "synthetic: hidden size H");
ABSL_FLAG(int64_t, inter, 1408, "synthetic: expert intermediate size I");
ABSL_FLAG(int64_t, experts, 64, "synthetic: routed experts E");
ABSL_FLAG(int64_t, top_k, 6, "synthetic: experts per token k");
ABSL_FLAG(int64_t, shared_inter, 0, "synthetic: shared expert size (0: none)");
ABSL_FLAG(std::string, moe_options, "",
          "synthetic: further layer options as JSON, e.g. "
          "{\"score_func\":\"sigmoid\",\"n_groups\":8,\"topk_groups\":4}");
ABSL_FLAG(uint64_t, seed, 1, "synthetic: weight and input seed");
ABSL_FLAG(int64_t, tokens, 512, "synthetic: tokens N per step");
ABSL_FLAG(int, reps, 5, "synthetic: timed repetitions");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "expert weights: auto (the checkpoint's own storage; fp32 for "
          "--synthetic), f32, bf16, fp8 (e4m3 with 128x128 block scales), "
          "mxfp4 (routed experts E2M1 with an E8M0 scale per 32 inputs) or "
          "nvfp4 (routed experts E2M1 with an E4M3 scale per 16 inputs and "
          "an fp32 scale per tensor)");
ABSL_FLAG(int, threads, 0, "compute threads (0: all cores)");
ABSL_FLAG(std::string, isa, "auto",
          "CPU kernels: auto, avx512, avx2 or generic (for comparisons)");
ABSL_FLAG(bool, skip_references, false,
          "synthetic: do not measure the sgemm/read references");
ABSL_FLAG(std::string, device, "cpu",
          "synthetic: cpu, cuda or cuda:N (bf16 on the GPU, compared with a "
          "dense cuBLASLt GEMM of the same FLOPs)");
ABSL_FLAG(bool, experts_only, false,
          "with --device cuda: time the grouped SwiGLU alone on --tokens "
          "routed rows over --experts local experts");
ABSL_FLAG(bool, collective, false,
          "time the NCCL dispatch and combine against ncclAlltoAll on the "
          "same buffers, one rank per GPU (--gpus), --tokens per rank");
ABSL_FLAG(int, gpus, 0, "collective: GPUs to use (0: all visible)");

namespace moe {
namespace {

int Threads() { return ThreadsOrAllCores(absl::GetFlag(FLAGS_threads)); }

absl::Status RunCheckpoint() {
  const std::string input = absl::GetFlag(FLAGS_input);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (input.empty() || output.empty() || absl::GetFlag(FLAGS_layer) < 0) {
    return absl::InvalidArgumentError(
        "--model needs --layer L, --input IN.safetensors and --output "
        "OUT.safetensors");
  }
  MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                       ParseWeightDType(absl::GetFlag(FLAGS_weight_dtype)));
  MOE_ASSIGN_OR_RETURN(auto ckpt,
                       HfCheckpoint::Open(absl::GetFlag(FLAGS_model)));
  const int64_t layer = absl::GetFlag(FLAGS_layer);
  MOE_ASSIGN_OR_RETURN(Matrix x,
                       ReadMatrix(input, absl::GetFlag(FLAGS_input_tensor)));
  const int64_t H = ckpt->info().layer.hidden;
  if (x.cols != H) {
    return absl::InvalidArgumentError(
        absl::StrCat(input, ": x has hidden size ", x.cols, ", layer ", layer,
                     " of ", ckpt->info().source, " expects ", H));
  }
  MOE_ASSIGN_OR_RETURN(auto moe,
                       LocalMoe::Create(*ckpt, "cpu", dtype, Threads(),
                                        std::max<int64_t>(x.rows, 1), layer));
  std::vector<float> y(x.rows * H);
  Routing routing;
  MOE_RETURN_IF_ERROR(
      moe->Forward(layer, x.data.data(), {.n = x.rows}, y.data(), &routing));
  SafetensorsWriter out;
  out.AddF32("y", {x.rows, H}, y);
  if (absl::GetFlag(FLAGS_routing)) {
    std::vector<int64_t> idx(routing.expert.begin(), routing.expert.end());
    out.AddI64("top_idx", {x.rows, routing.slots}, idx);
    out.AddF32("top_w", {x.rows, routing.slots}, routing.weight);
  }
  MOE_RETURN_IF_ERROR(out.WriteFile(output));
  MOE_ASSIGN_OR_RETURN(WeightDType resolved, ResolveWeightDType(dtype, *ckpt));
  const ProcessMemory mem = ReadProcessMemory();
  std::fprintf(stderr,
               "moe-bench: layer %ld of %s (%s), %s experts: %ld tokens -> %s; "
               "rss %.1f MiB (peak %.1f MiB)\n",
               static_cast<long>(layer), ckpt->info().source.c_str(),
               ckpt->info().family.c_str(),
               std::string(WeightDTypeName(resolved)).c_str(),
               static_cast<long>(x.rows), output.c_str(),
               mem.rss_bytes / 1048576.0, mem.peak_rss_bytes / 1048576.0);
  return absl::OkStatus();
}

absl::StatusOr<SyntheticSpec> SyntheticSpecFromFlags() {
  SyntheticArgs args;
  args.hidden = absl::GetFlag(FLAGS_hidden);
  args.inter = absl::GetFlag(FLAGS_inter);
  args.experts = absl::GetFlag(FLAGS_experts);
  args.top_k = absl::GetFlag(FLAGS_top_k);
  args.shared_inter = absl::GetFlag(FLAGS_shared_inter);
  args.seed = absl::GetFlag(FLAGS_seed);
  args.options_json = absl::GetFlag(FLAGS_moe_options);
  return MakeSyntheticSpec(args);
}

// The GPU modes; an error naming the missing backend in CPU-only builds.
absl::Status RunCuda(const DeviceSpec& device) {
#ifdef MOE_HAVE_CUDA
  const int reps = absl::GetFlag(FLAGS_reps);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (absl::GetFlag(FLAGS_collective)) {
    bench::CollectiveBenchArgs a;
    a.gpus = absl::GetFlag(FLAGS_gpus);
    a.tokens = absl::GetFlag(FLAGS_tokens);
    a.hidden = absl::GetFlag(FLAGS_hidden);
    a.experts = absl::GetFlag(FLAGS_experts);
    a.top_k = absl::GetFlag(FLAGS_top_k);
    a.reps = reps;
    a.seed = seed;
    return bench::RunCudaCollective(a);
  }
  if (absl::GetFlag(FLAGS_experts_only)) {
    if (!device.cuda) {
      return absl::InvalidArgumentError("--experts-only needs --device cuda");
    }
    bench::ExpertsBenchArgs a;
    a.device = device.ordinal;
    a.hidden = absl::GetFlag(FLAGS_hidden);
    a.inter = absl::GetFlag(FLAGS_inter);
    a.experts = absl::GetFlag(FLAGS_experts);
    a.rows = absl::GetFlag(FLAGS_tokens);
    a.reps = reps;
    a.seed = seed;
    MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                         ParseWeightDType(absl::GetFlag(FLAGS_weight_dtype)));
    if (dtype == WeightDType::kF32) {
      return absl::InvalidArgumentError(
          "--experts-only times bf16 experts, and block-scaled FP8 experts "
          "next to them with --weight-dtype fp8; --weight-dtype f32 is not "
          "a GPU expert dtype");
    }
    a.fp8 = dtype == WeightDType::kFP8;
    return bench::RunCudaExperts(a);
  }
  MOE_ASSIGN_OR_RETURN(SyntheticSpec spec, SyntheticSpecFromFlags());
  return bench::RunCudaLayer(spec, device.ordinal, absl::GetFlag(FLAGS_tokens),
                             reps);
#else
  return absl::UnimplementedError(
      "--device cuda and --collective need a build with the CUDA backend "
      "(-DMOE_CUDA=AUTO or ON where nvcc is installed)");
#endif
}

// A synthetic run as the flags describe it.
struct SyntheticRun {
  SyntheticSpec spec;
  WeightDType dtype = WeightDType::kF32;
  int64_t tokens = 0;  // N per step
  int reps = 0;
  int threads = 0;
};

absl::StatusOr<SyntheticRun> SyntheticRunFromFlags() {
  SyntheticRun run;
  MOE_ASSIGN_OR_RETURN(run.spec, SyntheticSpecFromFlags());
  MOE_ASSIGN_OR_RETURN(run.dtype,
                       ParseWeightDType(absl::GetFlag(FLAGS_weight_dtype)));
  run.tokens = absl::GetFlag(FLAGS_tokens);
  run.reps = absl::GetFlag(FLAGS_reps);
  if (run.tokens < 0 || run.reps < 1) {
    return absl::InvalidArgumentError("--tokens must be >= 0 and --reps >= 1");
  }
  run.threads = Threads();
  return run;
}

// Per timed step: time, work and bytes rates, and the references measured
// right after it; the mean stage times and experts touched.
struct StepSeries {
  std::vector<double> seconds, gflops, gbps, sgemm, read;
  StageTimes mean;
  double touched_sum = 0;
};

// Adds one timed step of `run` to `series`.
void RecordStep(const SyntheticRun& run, const LayerWeights& w,
                const Routing& routing, const StageTimes& t,
                StepSeries* series) {
  const MoeLayerConfig& c = run.spec.layer;
  const int64_t H = c.hidden, n = run.tokens;
  const double s = t.total_us / 1e6;
  series->seconds.push_back(s);
  StageTimes& mean = series->mean;
  for (auto [sum, part] : {std::pair{&mean.route_us, t.route_us},
                           {&mean.plan_us, t.plan_us},
                           {&mean.dispatch_us, t.dispatch_us},
                           {&mean.experts_us, t.experts_us},
                           {&mean.combine_us, t.combine_us},
                           {&mean.shared_us, t.shared_us}}) {
    *sum += part / run.reps;
  }
  int64_t slots = 0, touched = 0;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    slots += routing.expert_counts[e];
    touched += routing.expert_counts[e] > 0;
  }
  series->touched_sum += touched;
  const double flops = 6.0 * H * c.inter * slots +
                       6.0 * H * c.shared_inter * n +
                       2.0 * H * c.num_experts * n;
  const double bytes = static_cast<double>(touched) * w.expert_bytes() +
                       (w.has_shared ? w.shared.bytes() : 0) + w.gate.bytes();
  series->gflops.push_back(flops / s / 1e9);
  series->gbps.push_back(bytes / s / 1e9);
}

// Each repetition gets a fresh input, hence fresh routing and a fresh set
// of touched experts: no step is flattered by weights left in cache by the
// one before. Work and bytes are counted per step. One sgemm and one read
// pass of the references follow each timed step, so both series see the
// same machine; the figures are the medians of each.
absl::StatusOr<StepSeries> TimeSteps(const SyntheticRun& run,
                                     CpuBackend& backend) {
  const LayerWeights& w = *backend.layer(0);
  const int64_t n = run.tokens, H = run.spec.layer.hidden;
  std::vector<float> x(n * H), y(n * H);
  std::optional<bench::MachineReferences> refs;
  if (!absl::GetFlag(FLAGS_skip_references)) refs.emplace(run.threads);
  LocalMoe moe(&backend);
  Routing routing;
  StepSeries series;
  for (int r = 0; r < run.reps + 2; ++r) {  // two warm-up steps
    FillSyntheticInput(run.spec.seed + 1 + r, n * H, x.data());
    StageTimes t;
    MOE_RETURN_IF_ERROR(
        moe.Forward(0, x.data(), {.n = n}, y.data(), &routing, {.times = &t}));
    if (r < 2) continue;
    RecordStep(run, w, routing, t, &series);
    if (refs) {
      series.sgemm.push_back(refs->SgemmGflops());
      series.read.push_back(refs->ReadGbps());
    }
  }
  return series;
}

// The medians of a StepSeries.
struct SyntheticFigures {
  double median_s, min_s, max_s, touched, gflops, gbps, ref_sgemm, ref_read;
  double ref_fma = 0;  // register-only FMA peak at the kernels' ISA
  // Packed expert weights (routed and shared) and the process's memory
  // after the run.
  double weight_bytes = 0, rss_bytes = 0, peak_rss_bytes = 0;
};

SyntheticFigures FiguresOf(StepSeries series, int reps) {
  SyntheticFigures f;
  f.median_s = bench::Median(series.seconds);
  std::sort(series.seconds.begin(), series.seconds.end());
  f.min_s = series.seconds.front();
  f.max_s = series.seconds.back();
  f.touched = series.touched_sum / reps;
  f.gflops = bench::Median(series.gflops);
  f.gbps = bench::Median(series.gbps);
  f.ref_sgemm = bench::Median(series.sgemm);
  f.ref_read = bench::Median(series.read);
  return f;
}

void PrintText(const SyntheticRun& run, const StageTimes& mean,
               const SyntheticFigures& f) {
  const MoeLayerConfig& c = run.spec.layer;
  std::printf(
      "layer H=%ld I=%ld E=%ld k=%ld shared=%ld N=%ld weights=%s isa=%s "
      "threads=%d\n",
      static_cast<long>(c.hidden), static_cast<long>(c.inter),
      static_cast<long>(c.num_experts), static_cast<long>(c.top_k),
      static_cast<long>(c.shared_inter), static_cast<long>(run.tokens),
      std::string(WeightDTypeName(run.dtype)).c_str(),
      kernels::cpu::GemmIsaName(), run.threads);
  std::printf(
      "memory: experts %.1f MiB packed, process rss %.1f MiB (peak %.1f "
      "MiB)\n",
      f.weight_bytes / 1048576.0, f.rss_bytes / 1048576.0,
      f.peak_rss_bytes / 1048576.0);
  std::printf("step median %.3f ms over %d reps (min %.3f, max %.3f)\n",
              f.median_s * 1e3, run.reps, f.min_s * 1e3, f.max_s * 1e3);
  std::printf(
      "stages (mean us): route %.0f plan %.0f dispatch %.0f experts %.0f "
      "combine %.0f shared %.0f\n",
      mean.route_us, mean.plan_us, mean.dispatch_us, mean.experts_us,
      mean.combine_us, mean.shared_us);
  std::printf(
      "%.1f GFLOP/s (%.0f%% of sgemm %.1f), weights %.2f GB/s "
      "(%.0f%% of read %.2f), %.1f of %ld experts touched per step\n",
      f.gflops, f.ref_sgemm > 0 ? 100 * f.gflops / f.ref_sgemm : 0, f.ref_sgemm,
      f.gbps, f.ref_read > 0 ? 100 * f.gbps / f.ref_read : 0, f.ref_read,
      f.touched, static_cast<long>(c.num_experts));
  std::printf(
      "references: OpenBLAS core %s; FMA peak at %s %.1f GFLOP/s (layer at "
      "%.0f%% of it)\n",
      bench::OpenblasCore().c_str(), kernels::cpu::GemmIsaName(), f.ref_fma,
      f.ref_fma > 0 ? 100 * f.gflops / f.ref_fma : 0);
}

void PrintJson(const SyntheticRun& run, const SyntheticFigures& f) {
  const MoeLayerConfig& c = run.spec.layer;
  nlohmann::json j = {
      {"hidden", c.hidden},
      {"inter", c.inter},
      {"experts", c.num_experts},
      {"top_k", c.top_k},
      {"shared_inter", c.shared_inter},
      {"tokens", run.tokens},
      {"weight_dtype", WeightDTypeName(run.dtype)},
      {"isa", kernels::cpu::GemmIsaName()},
      {"threads", run.threads},
      {"reps", run.reps},
      {"step_ms", f.median_s * 1e3},
      {"tokens_per_s", f.median_s > 0 ? run.tokens / f.median_s : 0.0},
      {"gflops", f.gflops},
      {"weight_gbps", f.gbps},
      {"experts_touched", f.touched},
      {"ref_sgemm_gflops", f.ref_sgemm},
      {"ref_read_gbps", f.ref_read},
      {"gflops_vs_sgemm", f.ref_sgemm > 0 ? f.gflops / f.ref_sgemm : 0.0},
      {"weight_gbps_vs_read", f.ref_read > 0 ? f.gbps / f.ref_read : 0.0},
      {"openblas_core", bench::OpenblasCore()},
      {"ref_fma_peak_gflops", f.ref_fma},
      {"gflops_vs_fma_peak", f.ref_fma > 0 ? f.gflops / f.ref_fma : 0.0},
      {"expert_weight_mib", f.weight_bytes / 1048576.0},
      {"rss_mib", f.rss_bytes / 1048576.0},
      {"peak_rss_mib", f.peak_rss_bytes / 1048576.0}};
  std::printf("%s\n", j.dump().c_str());
}

absl::Status RunSynthetic() {
  MOE_ASSIGN_OR_RETURN(SyntheticRun run, SyntheticRunFromFlags());
  MOE_ASSIGN_OR_RETURN(auto model, MakeSyntheticModel(run.spec));
  LoadOptions opts;
  opts.dtype = run.dtype;
  opts.num_threads = run.threads;
  CpuBackend backend(run.threads);
  MOE_RETURN_IF_ERROR(
      backend.Load(*model, opts, std::max<int64_t>(run.tokens, 1)));
  // Report what was loaded, not "auto".
  run.dtype = backend.layer(0)->dtype;
  MOE_ASSIGN_OR_RETURN(StepSeries series, TimeSteps(run, backend));
  const StageTimes mean = series.mean;
  SyntheticFigures figures = FiguresOf(std::move(series), run.reps);
  if (!absl::GetFlag(FLAGS_skip_references)) {
    std::vector<double> fma;
    for (int i = 0; i < 3; ++i) {
      fma.push_back(
          bench::FmaPeakGflops(kernels::cpu::GemmIsaName(), run.threads));
    }
    figures.ref_fma = bench::Median(fma);
  }
  const LayerWeights& w = *backend.layer(0);
  figures.weight_bytes =
      static_cast<double>(w.expert_bytes()) * w.num_local_experts() +
      (w.has_shared ? w.shared.bytes() : 0);
  const ProcessMemory mem = ReadProcessMemory();
  figures.rss_bytes = static_cast<double>(mem.rss_bytes);
  figures.peak_rss_bytes = static_cast<double>(mem.peak_rss_bytes);
  PrintText(run, mean, figures);
  PrintJson(run, figures);
  return absl::OkStatus();
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::ParseOnlyFlagsOrExit(
      argc, argv,
      "Run one MoE layer of a checkpoint, or time a synthetic layer.\n"
      "  moe-bench --model DIR --layer L --input IN.safetensors --output "
      "OUT.safetensors [--weight-dtype auto|f32|bf16|fp8|mxfp4|nvfp4] "
      "[--routing]\n"
      "  moe-bench --synthetic --hidden H --inter I --experts E --top-k K "
      "[--shared-inter S] --tokens N "
      "[--weight-dtype auto|f32|bf16|fp8|mxfp4|nvfp4] "
      "[--reps R]\n"
      "  moe-bench --device cuda[:N] [--experts-only [--weight-dtype fp8]] "
      "--hidden H --inter I --experts E --top-k K --tokens N\n"
      "  moe-bench --collective [--gpus G] --hidden H --experts E --top-k K "
      "--tokens N");
  absl::Status s;
  const std::string isa = absl::GetFlag(FLAGS_isa);
  if (isa != "auto" && !moe::kernels::cpu::SetGemmIsa(isa.c_str())) {
    s = absl::InvalidArgumentError("--isa " + isa +
                                   ": not one of auto, avx512, avx2, generic "
                                   "supported by this CPU");
  } else if (!absl::GetFlag(FLAGS_model).empty()) {
    s = moe::RunCheckpoint();
  } else if (auto device = moe::ParseDeviceSpec(absl::GetFlag(FLAGS_device));
             !device.ok()) {
    s = device.status();
  } else if (device->cuda || absl::GetFlag(FLAGS_collective) ||
             absl::GetFlag(FLAGS_experts_only)) {
    s = moe::RunCuda(*device);
  } else if (absl::GetFlag(FLAGS_synthetic)) {
    s = moe::RunSynthetic();
  } else {
    s = absl::InvalidArgumentError(
        "give --model DIR or --synthetic (see --help)");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
    // INVALID_ARGUMENT: flags that are wrong or do not fit together (or
    // an --input that does not fit the --model).
    return s.code() == absl::StatusCode::kInvalidArgument ? moe::kExitUsage : 1;
  }
  return 0;
}
