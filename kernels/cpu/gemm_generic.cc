// Portable fallback of GemmPanels for CPUs without AVX2/FMA.
#include <bit>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_store.h"

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

template <typename W>
void Run(const float* const* a_rows, int64_t m, int64_t k, const W* packed,
         int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
         int64_t n_out, float* const* out_rows) {
  float tile[kRows * kPanelWidth];
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const W* w = packed + p * kPanelWidth * k;
    for (int64_t i = 0; i < m; i += kRows) {
      const int rows = static_cast<int>(m - i < kRows ? m - i : kRows);
      for (float& t : tile) t = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) {
        const W* wk = w + kk * kPanelWidth;
        for (int r = 0; r < rows; ++r) {
          const float a = a_rows[i + r][kk];
          float* t = tile + r * kPanelWidth;
          for (int c = 0; c < kPanelWidth; ++c) t[c] += a * Widen(wk[c]);
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
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
