// AVX-512 GemmPanels: 12x32 register tile (24 zmm accumulators), weights
// widened from bf16 in registers. Built with -mavx512f/bw/dq/vl.
#include <immintrin.h>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_helpers.h"
#include "kernels/cpu/tile_store.h"

namespace moe::kernels::cpu::internal {
namespace {

constexpr int kTileRows = 12;
// Depth of a K block: 256 x 32 fp32 weights = 32 KiB, inside L1d.
constexpr int64_t kKBlock = 256;

inline void LoadW(const float* p, __m512* lo, __m512* hi) {
  *lo = _mm512_loadu_ps(p);
  *hi = _mm512_loadu_ps(p + 16);
}

inline __m512 WidenBf16(__m256i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

inline void LoadW(const uint16_t* p, __m512* lo, __m512* hi) {
  *lo = WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  *hi = WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
}

// tile[r][0..32) (+)= sum_kk ap[kk*MR + r] * w[kk][0..32); starts from
// zero when `first`, else accumulates onto the tile.
template <int MR, typename W>
void Tile(const float* ap, int64_t k, const W* w, float* tile, bool first,
          const W* prefetch) {
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) {
    lo[r] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(tile + r * kPanelWidth);
    hi[r] = first ? _mm512_setzero_ps()
                  : _mm512_loadu_ps(tile + r * kPanelWidth + 16);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    PrefetchStep(prefetch, kk);
    __m512 w0, w1;
    LoadW(w + kk * kPanelWidth, &w0, &w1);
    const float* a = ap + kk * MR;
    for (int r = 0; r < MR; ++r) {
      const __m512 b = _mm512_set1_ps(a[r]);
      lo[r] = _mm512_fmadd_ps(b, w0, lo[r]);
      hi[r] = _mm512_fmadd_ps(b, w1, hi[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(tile + r * kPanelWidth, lo[r]);
    _mm512_storeu_ps(tile + r * kPanelWidth + 16, hi[r]);
  }
}

template <typename W>
using TileFn = void (*)(const float*, int64_t, const W*, float*, bool,
                        const W*);

// Plain array (no std::array): see ThreadScratch for why.
template <typename W>
constexpr TileFn<W> kTiles[12] = {&Tile<1, W>,  &Tile<2, W>,  &Tile<3, W>,
                                  &Tile<4, W>,  &Tile<5, W>,  &Tile<6, W>,
                                  &Tile<7, W>,  &Tile<8, W>,  &Tile<9, W>,
                                  &Tile<10, W>, &Tile<11, W>, &Tile<12, W>};

#include "kernels/cpu/gemm_driver.h"  // NOLINT: inside the namespace

}  // namespace

void GemmPanelsAvx512(const float* const* a_rows, int64_t m, int64_t k,
                      const void* packed, WeightFormat format,
                      int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                      int64_t n_out, float* const* out_rows) {
  if (format == WeightFormat::kF32) {
    Run(a_rows, m, k, static_cast<const float*>(packed), panel_begin, panel_end,
        epilogue, n_out, out_rows);
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
