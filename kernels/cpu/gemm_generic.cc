// Portable fallback of GemmPanels for CPUs without AVX2/FMA.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_store.h"
#include "kernels/mxfp4_rule.h"
#include "kernels/nvfp4_rule.h"

namespace moe::kernels::cpu::internal {
namespace {

constexpr int kRows = 4;

template <typename W>
float Widen(W w);
template <>
float Widen<float>(float w) {
  return w;
}
template <>
float Widen<uint16_t>(uint16_t w) {
  return std::bit_cast<float>(static_cast<uint32_t>(w) << 16);
}

// e4m3 code -> its value times 2^-8 (the packed scales carry 2^8, see
// Fp8PanelBytes): the same values the AVX paths get from fp16 patterns.
struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 0xf, m = b & 7;
      float x;
      if (e == 0xf && m == 7) {
        x = std::numeric_limits<float>::quiet_NaN();
      } else if (e == 0) {
        x = std::ldexp(static_cast<float>(m), -9 - 8);
      } else {
        x = std::ldexp(1.0f + m / 8.0f, e - 7 - 8);
      }
      v[b] = b & 0x80 ? -x : x;
    }
  }
};

template <>
float Widen<uint8_t>(uint8_t w) {
  static const Fp8Table table;
  return table.v[w];
}

// MXFP4 panels (see Mxfp4PanelBytes): kStep bytes a K step, then E8M0
// scales, one per column per 32 steps.
struct Mxfp4Byte {
  uint8_t bits;
};
// NVFP4 panels (see Nvfp4PanelBytes): the same codes, then E4M3 scales, one
// per column per 16 steps, then the 32 column scales.
struct Nvfp4Byte {
  uint8_t bits;
};

// The fp32 weights of K step kk of a panel whose codes start at w (and
// whose scales, for FP8 and MXFP4, at `scales`): the dequantised values,
// rounded once as in fp32 (MXFP4: exact).
template <typename W>
void WidenStep(const W* w, const void* scales, int64_t kk, float* wf) {
  if constexpr (std::is_same_v<W, Mxfp4Byte>) {
    const Mxfp4Byte* wk = w + kk * (kPanelWidth / 2);
    const auto* s =
        static_cast<const uint8_t*>(scales) + kk / kMxBlock * kPanelWidth;
    for (int c = 0; c < kPanelWidth; ++c) {
      const uint8_t byte = wk[c % (kPanelWidth / 2)].bits;
      const uint8_t code = c < kPanelWidth / 2 ? byte & 0xf : byte >> 4;
      wf[c] = E2M1ToF32(code) * E8M0ToF32(s[c]);
    }
  } else if constexpr (std::is_same_v<W, Nvfp4Byte>) {
    // The E4M3 scale itself: the column scales (global times 2^8) are
    // applied to the sums, so the 2^-8 of the AVX paths is taken here too.
    const Nvfp4Byte* wk = w + kk * (kPanelWidth / 2);
    const auto* s =
        static_cast<const uint8_t*>(scales) + kk / kNvBlock * kPanelWidth;
    for (int c = 0; c < kPanelWidth; ++c) {
      const uint8_t byte = wk[c % (kPanelWidth / 2)].bits;
      const uint8_t code = c < kPanelWidth / 2 ? byte & 0xf : byte >> 4;
      wf[c] = E2M1ToF32(code) * (E4M3ToF32(s[c]) * (1.0f / 256.0f));
    }
  } else if constexpr (sizeof(W) == 1) {
    const W* wk = w + kk * kPanelWidth;
    const float* s =
        static_cast<const float*>(scales) + kk / kFp8BlockK * kPanelWidth;
    for (int c = 0; c < kPanelWidth; ++c) wf[c] = Widen(wk[c]) * s[c];
  } else {
    const W* wk = w + kk * kPanelWidth;
    for (int c = 0; c < kPanelWidth; ++c) wf[c] = Widen(wk[c]);
  }
}

template <typename W>
void Run(const float* const* a_rows, int64_t m, int64_t k, const W* packed,
         int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
         int64_t n_out, float* const* out_rows) {
  constexpr bool kMx = std::is_same_v<W, Mxfp4Byte>;
  constexpr bool kNv = std::is_same_v<W, Nvfp4Byte>;
  const int64_t stride = kMx              ? Mxfp4PanelBytes(k)
                         : kNv            ? Nvfp4PanelBytes(k)
                         : sizeof(W) == 1 ? Fp8PanelBytes(k)
                                          : kPanelWidth * k;
  const int64_t codes = kMx || kNv ? kPanelWidth / 2 * k : kPanelWidth * k;
  float tile[kRows * kPanelWidth];
  float wf[kPanelWidth];
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const W* w = packed + p * stride;
    const void* scales = w + codes;
    for (int64_t i = 0; i < m; i += kRows) {
      const int rows = static_cast<int>(m - i < kRows ? m - i : kRows);
      for (float& t : tile) t = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) {
        WidenStep(w, scales, kk, wf);
        for (int r = 0; r < rows; ++r) {
          const float a = a_rows[i + r][kk];
          float* t = tile + r * kPanelWidth;
          for (int c = 0; c < kPanelWidth; ++c) t[c] += a * wf[c];
        }
      }
      if constexpr (kNv) {
        // Each column's sum times its column scale (see Nvfp4PanelBytes).
        float col[kPanelWidth];
        std::memcpy(col,
                    reinterpret_cast<const uint8_t*>(w) + codes +
                        NvBlocks(k) * kPanelWidth,
                    sizeof(col));
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < kPanelWidth; ++c) {
            tile[r * kPanelWidth + c] *= col[c];
          }
        }
      }
      StoreTile(tile, rows, p, epilogue, n_out, out_rows + i);
    }
  }
}

}  // namespace

void GemmPanelsGeneric(const float* const* a_rows, int64_t m, int64_t k,
                       const void* packed, WeightFormat format,
                       int64_t panel_begin, int64_t panel_end,
                       Epilogue epilogue, int64_t n_out,
                       float* const* out_rows) {
  if (format == WeightFormat::kF32) {
    Run(a_rows, m, k, static_cast<const float*>(packed), panel_begin, panel_end,
        epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kFP8) {
    Run(a_rows, m, k, static_cast<const uint8_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kMXFP4) {
    Run(a_rows, m, k, static_cast<const Mxfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kNVFP4) {
    Run(a_rows, m, k, static_cast<const Nvfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
