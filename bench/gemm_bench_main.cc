// moe-gemm-bench: one routed expert's two GEMMs (fused gate/up with SwiGLU,
// then down) through the CPU kernels' GemmPanels on one thread, for a few
// rows (decode) and fp32, bf16, FP8, MXFP4 or NVFP4 weights, over --experts
// copies so that the weights stream from DRAM (1: they stay in cache). Reports
// the fastest and the median call and the weight bytes read per second: the
// kernels' own speed, apart from routing, threading and the rest of a layer,
// and robust on a shared machine (the fastest of many short calls).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "core/dtype.h"
#include "core/flag_help.h"
#include "kernels/cpu/packed_gemm.h"

ABSL_FLAG(std::string, format, "mxfp4",
          "weights: mxfp4, nvfp4, fp8, bf16 or f32");
ABSL_FLAG(int64_t, rows, 1, "rows (tokens routed to the expert)");
ABSL_FLAG(int64_t, hidden, 2048, "hidden size H");
ABSL_FLAG(int64_t, inter, 1408, "expert intermediate size I");
ABSL_FLAG(int64_t, experts, 48, "weight copies cycled through (1: cached)");
ABSL_FLAG(int64_t, reps, 600, "timed expert calls");
ABSL_FLAG(std::string, isa, "auto", "CPU kernels: auto, avx512, avx2, generic");

namespace moe {
namespace {

namespace kc = kernels::cpu;

// Packs a random [n, k] weight: fp32 values in [-1, 1), or MXFP4 codes with
// E8M0 scales near 127 (as real checkpoints have).
std::vector<uint8_t> PackRandom(kc::WeightFormat format, int64_t n, int64_t k,
                                std::mt19937& rng) {
  std::vector<uint8_t> packed(kc::PackedBytes(format, n, k));
  if (format == kc::WeightFormat::kF32 || format == kc::WeightFormat::kBF16) {
    std::vector<float> w(n * k);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : w) v = u(rng);
    std::vector<const float*> rows(n);
    for (int64_t r = 0; r < n; ++r) rows[r] = w.data() + r * k;
    if (format == kc::WeightFormat::kF32) {
      kc::PackRowsF32(rows.data(), n, k, k,
                      reinterpret_cast<float*>(packed.data()));
      return packed;
    }
    std::vector<uint16_t> b(n * k);
    for (size_t i = 0; i < b.size(); ++i) b[i] = F32ToBf16(w[i]);
    std::vector<const uint16_t*> brows(n);
    for (int64_t r = 0; r < n; ++r) brows[r] = b.data() + r * k;
    kc::PackRowsBF16(brows.data(), n, k, k,
                     reinterpret_cast<uint16_t*>(packed.data()));
    return packed;
  }
  if (format == kc::WeightFormat::kFP8) {
    // e4m3 codes without the NaN pattern (0x7f/0xff), one scale per 128.
    std::vector<uint8_t> codes(n * k);
    for (uint8_t& c : codes) {
      c = static_cast<uint8_t>(rng() % 254);
      if ((c & 0x7f) == 0x7f) c = 0;
    }
    const int64_t blocks = (k + 127) / 128;
    std::vector<float> scales(n * blocks, 0.01f);
    std::vector<const uint8_t*> rows(n);
    std::vector<const float*> row_scales(n);
    for (int64_t r = 0; r < n; ++r) {
      rows[r] = codes.data() + r * k;
      row_scales[r] = scales.data() + r * blocks;
    }
    kc::PackRowsFP8(rows.data(), row_scales.data(), n, k, k, packed.data());
    return packed;
  }
  if (format == kc::WeightFormat::kNVFP4) {
    // E4M3 scales in [2^-3, 2^4) (no NaN), a global scale per weight.
    const int64_t blocks = kernels::NvBlocks(k);
    std::vector<uint8_t> codes(n * (k + 1) / 2), scales(n * blocks);
    for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
    for (uint8_t& s : scales) s = static_cast<uint8_t>(0x20 + rng() % 0x40);
    std::vector<float> globals(n, 0.01f);
    std::vector<const uint8_t*> rows(n), row_scales(n);
    for (int64_t r = 0; r < n; ++r) {
      rows[r] = codes.data() + r * ((k + 1) / 2);
      row_scales[r] = scales.data() + r * blocks;
    }
    kc::PackRowsNVFP4(rows.data(), row_scales.data(), globals.data(), n, k, k,
                      packed.data());
    return packed;
  }
  const int64_t blocks = kernels::MxBlocks(k);
  std::vector<uint8_t> codes(n * (k + 1) / 2), scales(n * blocks);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales) s = static_cast<uint8_t>(112 + rng() % 24);
  std::vector<const uint8_t*> rows(n), row_scales(n);
  for (int64_t r = 0; r < n; ++r) {
    rows[r] = codes.data() + r * ((k + 1) / 2);
    row_scales[r] = scales.data() + r * blocks;
  }
  kc::PackRowsMXFP4(rows.data(), row_scales.data(), n, k, k, packed.data());
  return packed;
}

std::optional<kc::WeightFormat> FormatNamed(const std::string& name) {
  if (name == "mxfp4") return kc::WeightFormat::kMXFP4;
  if (name == "nvfp4") return kc::WeightFormat::kNVFP4;
  if (name == "fp8") return kc::WeightFormat::kFP8;
  if (name == "bf16") return kc::WeightFormat::kBF16;
  if (name == "f32") return kc::WeightFormat::kF32;
  return std::nullopt;
}

int Main() {
  const std::string name = absl::GetFlag(FLAGS_format);
  const auto format = FormatNamed(name);
  if (!format) {
    std::cerr << "--format: expected mxfp4, nvfp4, fp8, bf16 or f32, got "
              << name << "\n";
    return kExitUsage;
  }
  const int64_t m = absl::GetFlag(FLAGS_rows), h = absl::GetFlag(FLAGS_hidden),
                inter = absl::GetFlag(FLAGS_inter),
                copies = absl::GetFlag(FLAGS_experts),
                reps = absl::GetFlag(FLAGS_reps);
  if (m < 1 || h < 1 || inter < 1 || copies < 1 || reps < 1) {
    std::cerr << "--rows, --hidden, --inter, --experts and --reps must be "
                 "positive\n";
    return kExitUsage;
  }
  const std::string isa = absl::GetFlag(FLAGS_isa);
  if (isa != "auto" && !kc::SetGemmIsa(isa.c_str())) {
    std::cerr << "--isa: this CPU has no " << isa << "\n";
    return kExitUsage;
  }
  const int64_t ip = kc::PaddedInter(inter);
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> w13(copies), w2(copies);
  for (int64_t e = 0; e < copies; ++e) {
    w13[e] = PackRandom(*format, 2 * ip, h, rng);
    w2[e] = PackRandom(*format, h, ip, rng);
  }
  std::vector<float> x(m * h), hbuf(m * ip), y(m * h);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  std::vector<const float*> x_rows(m), h_in(m);
  std::vector<float*> h_rows(m), y_rows(m);
  for (int64_t r = 0; r < m; ++r) {
    x_rows[r] = x.data() + r * h;
    h_rows[r] = hbuf.data() + r * ip;
    h_in[r] = h_rows[r];
    y_rows[r] = y.data() + r * h;
  }
  std::vector<double> seconds;
  for (int64_t i = 0; i < reps; ++i) {
    const int64_t e = i % copies;
    const auto t0 = std::chrono::steady_clock::now();
    kc::GemmPanels(x_rows.data(), m, h, w13[e].data(), *format, 0,
                   2 * ip / kc::kPanelWidth, kc::Epilogue::kSwiGLU, 2 * ip,
                   h_rows.data());
    kc::GemmPanels(h_in.data(), m, ip, w2[e].data(), *format, 0,
                   kc::NumPanels(h), kc::Epilogue::kStore, h, y_rows.data());
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double bytes =
      static_cast<double>(w13[0].size()) + static_cast<double>(w2[0].size());
  const double best = seconds.front(), median = seconds[seconds.size() / 2];
  // A K step of a 32-column panel: 32 weights of each row.
  const double steps = (2.0 * ip * h + static_cast<double>(h) * ip) / 32.0;
  std::printf(
      "format=%s isa=%s rows=%lld hidden=%lld inter=%lld experts=%lld "
      "expert_mb=%.2f best_ms=%.4f median_ms=%.4f best_gbps=%.2f "
      "best_ns_per_32_weights=%.3f\n",
      name.c_str(), kc::GemmIsaName(), static_cast<long long>(m),
      static_cast<long long>(h), static_cast<long long>(inter),
      static_cast<long long>(copies), bytes / 1e6, best * 1e3, median * 1e3,
      bytes / best / 1e9, best * 1e9 / steps);
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::ParseOnlyFlagsOrExit(
      argc, argv,
      "moe-gemm-bench [--format mxfp4|fp8|bf16|f32] [--rows M] [--hidden H] "
      "[--inter I] [--experts E] [--reps R]: one expert's gate/up and down "
      "GEMMs through the CPU kernels, one thread");
  return moe::Main();
}
