// AVX2 MXFP4 GEMV (one row: at decode most experts see one token) by
// integer dot products. Widening 4-bit codes to fp32 costs AVX2 a shuffle
// and a convert per 8 weights besides the FMA, which bound the fp32 tiles
// below memory speed; vpmaddubsw multiplies 32 byte pairs at once instead.
//
// The weights: one pshufb looks each code up as 2v + 12 (v the E2M1 value,
// so 0..24, unsigned as vpmaddubsw wants). The activations: each 32-block of
// a row as an integer q_k = round(x_k 2^(22 - e)), 2^e above the block's
// largest magnitude (e at least -100), so |q_k| <= 2^22 and the rounding is
// at most 2^-22 of that magnitude (about two fp32 ulps of it; 2^-123 at
// most below 2^-100); q_k = 2^16 h + 2^8 m + l with
// signed bytes h (|h| <= 64), m and l. Then for one column and block
//   sum_k (2v_k + 12) q_k - 12 sum_k q_k = 2 sum_k v_k q_k,
// exact in int32 (the bytes' products are summed in int16 lanes, widened
// before they can overflow), converted to fp32 once and scaled by
// 2^(e - 23) and the column's E8M0 scale. So the weights stay exact and
// the activations carry 22 bits instead of fp32's 24; products, not
// rounded one by one, are summed exactly within a block.
//
// Lanes: a 32-byte load holds K steps kk and kk + 1 (16 bytes a step: byte
// c has column c in its low nibble, c + 16 in its high one). Codes of steps
// kk..kk+3 (two loads) are interleaved by vpunpck{l,h}bw so that lane 0
// holds column c's (kk, kk + 2) byte pairs and lane 1 its (kk + 1, kk + 3),
// against activation vectors laid out the same way (QuantiseRow).
//
// NVFP4 panels hold the same codes with one E4M3 scale per 16 steps: each
// 32-block's halves are summed apart in int32, both lanes' steps of a
// column added there (so one convert and one scale per column and half,
// without the lane shuffles of the scales), the halves' scaled sums added
// in fp32 and multiplied by 2^(e - 23) once per block; each column's sum
// is multiplied by its column scale at the end (see Nvfp4PanelBytes).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_helpers.h"
#include "kernels/cpu/tile_store.h"

namespace moe::kernels::cpu::internal {
namespace {

constexpr int kPieces = 3;             // h, m, l
constexpr int kGroups = kMxBlock / 4;  // 4 K steps each
// Activation bytes of one block of one row: [group][piece][32].
constexpr int64_t kBlockPieceBytes = kGroups * kPieces * 32;
// Code bytes of one block of a panel.
constexpr int64_t kBlockCodeBytes = kMxBlock * kPanelWidth / 2;

// One row's activations, quantised per 32-block.
struct QuantisedRow {
  const int8_t* pieces;  // [blocks][kBlockPieceBytes]
  // [blocks][2][8]: 12 sum q_k of lane 0's and 1's steps in the block's
  // first 16 steps, then in its last 16 (MXFP4 adds the two).
  const int32_t* corr;
  // [blocks][2]: 12 sum q_k over each half's 16 steps (NVFP4 adds lane 0's
  // and lane 1's sums of a column before the correction).
  const int32_t* half_corr;
  const float* scale;  // [blocks]: 2^(e - 23), 0 for a zero block
};

// Bytes of a row's quantised form in the scratch buffer (a multiple of 32:
// each part stays 32-byte aligned).
int64_t QuantisedBytes(int64_t blocks) {
  const int64_t bytes =
      blocks * (kBlockPieceBytes + 18 * sizeof(int32_t) + sizeof(float));
  return (bytes + 31) / 32 * 32;
}

// Quantises one block of a row (n <= 32 values, zeros past n).
void QuantiseBlock(const float* x, int64_t n, int8_t* pieces, int32_t* corr,
                   int32_t* half_corr, float* scale) {
  alignas(32) float v[kMxBlock] = {};
  std::memcpy(v, x, static_cast<size_t>(n) * sizeof(float));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  __m256 all = _mm256_setzero_ps();  // x * 0: 0, or NaN for inf and NaN
  for (int i = 0; i < kMxBlock; i += 8) {
    const __m256 x8 = _mm256_load_ps(v + i);
    amax = _mm256_max_ps(amax, _mm256_and_ps(x8, abs_mask));
    all = _mm256_add_ps(all, _mm256_mul_ps(x8, _mm256_setzero_ps()));
  }
  alignas(32) float lanes[8], zeros[8];
  _mm256_store_ps(lanes, amax);
  _mm256_store_ps(zeros, all);
  float m = 0.0f;
  bool finite = true;
  for (int i = 0; i < 8; ++i) {
    m = lanes[i] > m ? lanes[i] : m;
    finite = finite && zeros[i] == 0.0f;
  }
  alignas(32) int32_t q[kMxBlock] = {};
  if (!finite) {
    // Non-finite in, NaN out (the fp32 tiles give inf or NaN).
    *scale = std::nanf("");
  } else if (m == 0.0f) {
    *scale = 0.0f;
  } else {
    int e = 0;
    std::frexp(m, &e);  // m < 2^e: |q| <= 2^22
    // Blocks below 2^-100 are rounded to multiples of 2^-123 (far below
    // anything an fp32 sum of such values with larger ones keeps), so that
    // 2^(22 - e) and 2^(e - 23) stay normal floats.
    e = e < -100 ? -100 : e;
    // x * 2^(22 - e), exact, rounded to nearest even as std::nearbyint does.
    const __m256 f =
        _mm256_castsi256_ps(_mm256_set1_epi32((22 - e + 127) << 23));
    for (int i = 0; i < kMxBlock; i += 8) {
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(q + i),
          _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(v + i), f)));
    }
    *scale = std::ldexp(1.0f, e - 23);
  }
  // q = 2^16 h + 2^8 m + l, m and l in [-128, 127], |h| <= 64.
  alignas(32) int32_t p[kPieces][kMxBlock];
  const __m256i c128 = _mm256_set1_epi32(128), c255 = _mm256_set1_epi32(255);
  const auto low_byte = [&](__m256i a) {
    return _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(a, c128), c255),
                            c128);
  };
  for (int i = 0; i < kMxBlock; i += 8) {
    const __m256i qi =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(q + i));
    const __m256i l = low_byte(qi);
    const __m256i r = _mm256_srai_epi32(_mm256_sub_epi32(qi, l), 8);
    const __m256i mid = low_byte(r);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p[0] + i),
                       _mm256_srai_epi32(_mm256_sub_epi32(r, mid), 8));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p[1] + i), mid);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p[2] + i), l);
  }
  int32_t sum[2][2] = {};  // [half][lane], |.| <= 8 * 2^22
  for (int i = 0; i < kMxBlock; ++i) {
    // Steps kk, kk + 2 in lane 0; kk + 1, kk + 3 in lane 1.
    sum[i / (kMxBlock / 2)][i & 1] += q[i];
  }
  const auto pair = [](int32_t a, int32_t b) {
    return static_cast<int16_t>((a & 255) | ((b & 255) << 8));
  };
  for (int g = 0; g < kGroups; ++g) {
    for (int j = 0; j < kPieces; ++j) {
      const int32_t* s = p[j] + 4 * g;
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(pieces + (g * kPieces + j) * 32),
          _mm256_setr_m128i(_mm_set1_epi16(pair(s[0], s[2])),
                            _mm_set1_epi16(pair(s[1], s[3]))));
    }
  }
  for (int half = 0; half < 2; ++half) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(corr + 8 * half),
                       _mm256_setr_m128i(_mm_set1_epi32(12 * sum[half][0]),
                                         _mm_set1_epi32(12 * sum[half][1])));
    half_corr[half] = 12 * (sum[half][0] + sum[half][1]);
  }
}

QuantisedRow QuantiseRow(const float* x, int64_t k, uint8_t* buf) {
  const int64_t blocks = MxBlocks(k);
  int8_t* pieces = reinterpret_cast<int8_t*>(buf);
  int32_t* corr = reinterpret_cast<int32_t*>(buf + blocks * kBlockPieceBytes);
  int32_t* half_corr = corr + 16 * blocks;
  float* scale = reinterpret_cast<float*>(half_corr + 2 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n = k - b * kMxBlock < kMxBlock ? k - b * kMxBlock : kMxBlock;
    QuantiseBlock(x + b * kMxBlock, n, pieces + b * kBlockPieceBytes,
                  corr + 16 * b, half_corr + 2 * b, scale + b);
  }
  return {pieces, corr, half_corr, scale};
}

struct Tables {
  __m256i table, nibble, shift4, low_mid;
  Tables() {
    table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8,
                             6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11,
                             10, 9, 8, 6, 4, 0);
    nibble = _mm256_set1_epi8(0x0f);
    shift4 = _mm256_set1_epi16(0x1000);            // x * 2^12 >> 16: x >> 4
    low_mid = _mm256_set1_epi32(1 | (256 << 16));  // (l, m) -> l + 2^8 m
  }
};

// The fp32 sums of one panel, [column group of 8][four columns q][8 lanes].
// MXFP4: lane j < 4 is column 8g + 4q + j over lane 0's steps, j >= 4 the
// same column over lane 1's. NVFP4 sums both lanes' steps in int32 first
// and keeps column 8g + j in lane j of [g][0].
struct PanelSums {
  alignas(32) float v[4][2][8];
};

// The int32 sums of one 8-column group over a block's (MXFP4) or half's
// (NVFP4) steps, 2^16 H + 2^8 M + L per lane: less 12 sum q over the
// lane's steps, 2 sum v q, exact in int32 (|.| <= 16 * 12 * 2^22 < 2^31;
// the terms may wrap, the result does not). The int16 sums widen by
// interleaving: h under a zero int16 is 2^16 h, and (l, m) pairs meet
// (1, 2^8) in vpmaddwd (`ml`). sums[0] holds columns 0-3 of the group,
// sums[1] columns 4-7 (lanes as in PanelSums).
inline void WidenedSums(__m256i h, const __m256i ml[2], __m256i sums[2]) {
  sums[0] =
      _mm256_add_epi32(_mm256_unpacklo_epi16(_mm256_setzero_si256(), h), ml[0]);
  sums[1] =
      _mm256_add_epi32(_mm256_unpackhi_epi16(_mm256_setzero_si256(), h), ml[1]);
}

// One pass over a block: the codes' nibble half `half` (0: columns 0-15,
// 1: 16-31), columns 0-7 of it by vpunpcklbw and 8-15 by vpunpckhbw; adds
// the block's scaled sums into `sums`. MXFP4 (kNv false): `scales` are the
// block's 32 E8M0 bytes. NVFP4: the 32 E4M3 bytes of each of its `halves`
// 16-step halves (1 for a last block of at most 16 steps), one row after the
// other.
template <int half, bool kNv>
inline void BlockPass(const Tables& t, const uint8_t* codes,
                      const QuantisedRow& row, int64_t b, const uint8_t* scales,
                      int halves, const uint8_t* prefetch, PanelSums* sums) {
  __m256i h[2], mid[2], low[2], ml[2][2];
  h[0] = h[1] = _mm256_setzero_si256();
  ml[0][0] = ml[0][1] = ml[1][0] = ml[1][1] = _mm256_setzero_si256();
  const int8_t* xb = row.pieces + b * kBlockPieceBytes;
  const __m256 xs = _mm256_set1_ps(row.scale[b]);
  // NVFP4: each column's first half times its scale, then plus the second
  // half's, so that one multiply by xs and one add per 32 steps reach
  // `sums`, as for MXFP4.
  __m256 scaled[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int step_half = 0; step_half < 2; ++step_half) {
    if (kNv && step_half >= halves) break;
    mid[0] = mid[1] = low[0] = low[1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int g = 4 * step_half; g < 4 * step_half + 4; ++g) {
      if (prefetch != nullptr) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + g * 64),
                     _MM_HINT_T0);
      }
      __m256i a =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * 64));
      __m256i c = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(codes + g * 64 + 32));
      if constexpr (half != 0) {
        a = _mm256_mulhi_epu16(a, t.shift4);
        c = _mm256_mulhi_epu16(c, t.shift4);
      }
      const __m256i ua =
          _mm256_shuffle_epi8(t.table, _mm256_and_si256(a, t.nibble));
      const __m256i uc =
          _mm256_shuffle_epi8(t.table, _mm256_and_si256(c, t.nibble));
      const __m256i pairs[2] = {_mm256_unpacklo_epi8(ua, uc),
                                _mm256_unpackhi_epi8(ua, uc)};
      const __m256i* x =
          reinterpret_cast<const __m256i*>(xb + g * kPieces * 32);
      const __m256i xh = _mm256_load_si256(x), xm = _mm256_load_si256(x + 1),
                    xl = _mm256_load_si256(x + 2);
      for (int j = 0; j < 2; ++j) {
        h[j] = _mm256_add_epi16(h[j], _mm256_maddubs_epi16(pairs[j], xh));
        mid[j] = _mm256_add_epi16(mid[j], _mm256_maddubs_epi16(pairs[j], xm));
        low[j] = _mm256_add_epi16(low[j], _mm256_maddubs_epi16(pairs[j], xl));
      }
    }
    // m and l pairs reach 2 * 24 * 128 = 6144: four groups fit in int16
    // (h, |h| <= 64, takes all eight).
    for (int j = 0; j < 2; ++j) {
      ml[j][0] = _mm256_add_epi32(
          ml[j][0],
          _mm256_madd_epi16(_mm256_unpacklo_epi16(low[j], mid[j]), t.low_mid));
      ml[j][1] = _mm256_add_epi32(
          ml[j][1],
          _mm256_madd_epi16(_mm256_unpackhi_epi16(low[j], mid[j]), t.low_mid));
    }
    if constexpr (kNv) {
      const __m256i corr = _mm256_set1_epi32(row.half_corr[2 * b + step_half]);
      __m256 sf[2];
      WidenE4M3x16(reinterpret_cast<const E4M3Byte*>(
                       scales + step_half * kPanelWidth + 16 * half),
                   sf);
      for (int j = 0; j < 2; ++j) {
        __m256i lanes[2];
        WidenedSums(h[j], ml[j], lanes);
        // Lane 0's and lane 1's steps of columns 0-7 in one int32 vector
        // (16 steps: within the bound above).
        const __m256i both = _mm256_sub_epi32(
            _mm256_add_epi32(
                _mm256_permute2x128_si256(lanes[0], lanes[1], 0x20),
                _mm256_permute2x128_si256(lanes[0], lanes[1], 0x31)),
            corr);
        scaled[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(both), sf[j], scaled[j]);
      }
      h[0] = h[1] = _mm256_setzero_si256();
      ml[0][0] = ml[0][1] = ml[1][0] = ml[1][1] = _mm256_setzero_si256();
    }
  }
  if constexpr (kNv) {
    for (int j = 0; j < 2; ++j) {
      // xs is a power of two: the multiply is exact, the add rounds once.
      float* acc = sums->v[2 * half + j][0];
      _mm256_store_ps(acc, _mm256_fmadd_ps(scaled[j], xs, _mm256_load_ps(acc)));
    }
  } else {
    const int32_t* corr_b = row.corr + 16 * b;
    const __m256i corr = _mm256_add_epi32(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(corr_b)),
        _mm256_load_si256(reinterpret_cast<const __m256i*>(corr_b + 8)));
    for (int j = 0; j < 2; ++j) {
      const int group = 2 * half + j;  // columns 8 group .. + 8
      __m256i total[2];
      WidenedSums(h[j], ml[j], total);
      const __m256 sf = WidenE8M0x8(scales + 8 * group);
      const __m256 sc[2] = {_mm256_permute2f128_ps(sf, sf, 0x00),
                            _mm256_permute2f128_ps(sf, sf, 0x11)};
      for (int q = 0; q < 2; ++q) {
        // One rounding (the convert) before the FMA's: the scales are
        // powers of two, applied one after the other so that tiny ones
        // stay exact.
        const __m256i exact = _mm256_sub_epi32(total[q], corr);
        float* acc = sums->v[group][q];
        _mm256_store_ps(
            acc, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(exact), xs),
                                 sc[q], _mm256_load_ps(acc)));
      }
    }
  }
}

// The 32 outputs of one panel (k steps of codes, then the scales, and for
// NVFP4 the column scales).
template <bool kNv>
void Panel(const Tables& t, const QuantisedRow& row, int64_t k,
           const uint8_t* panel, const uint8_t* next, float* tile) {
  PanelSums sums;
  std::memset(&sums, 0, sizeof(sums));
  const uint8_t* scales = panel + kPanelWidth / 2 * k;
  // Scale rows a 32-step block spans: one E8M0, or two E4M3.
  constexpr int64_t kRows = kNv ? kMxBlock / kNvBlock : 1;
  const int64_t full = k / kMxBlock, blocks = MxBlocks(k);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* codes = panel + b * kBlockCodeBytes;
    alignas(32) uint8_t tail[kBlockCodeBytes];
    if (b == full) {
      // A short last block: its codes padded with zeros (value 0) against
      // the zero activations past k.
      std::memset(tail, 0, sizeof(tail));
      std::memcpy(tail, codes, static_cast<size_t>(k - b * kMxBlock) * 16);
      codes = tail;
    }
    // The scales sit after the codes, out of the codes' prefetch.
    _mm_prefetch(
        reinterpret_cast<const char*>(scales + (b + 2) * kRows * kPanelWidth),
        _MM_HINT_T0);
    const uint8_t* ahead = b + 2 < blocks
                               ? panel + (b + 2) * kBlockCodeBytes
                               : next + (b + 2 - blocks) * kBlockCodeBytes;
    const uint8_t* sb = scales + b * kRows * kPanelWidth;
    // NVFP4: a last block of at most 16 steps has one scale row (its second
    // half's codes and activations are zero, and past the scales lie the
    // column scales).
    const int halves = k - b * kMxBlock > kNvBlock ? 2 : 1;
    BlockPass<0, kNv>(t, codes, row, b, sb, halves, ahead, &sums);
    BlockPass<1, kNv>(t, codes, row, b, sb, halves, nullptr, &sums);
  }
  for (int group = 0; group < 4; ++group) {
    for (int q = 0; q < 2; ++q) {
      const float* a = sums.v[group][q];
      for (int j = 0; j < 4; ++j) {
        tile[8 * group + 4 * q + j] =
            kNv ? sums.v[group][0][4 * q + j] : a[j] + a[j + 4];
      }
    }
  }
  if constexpr (kNv) {
    float col[kPanelWidth];
    std::memcpy(col, scales + NvBlocks(k) * kPanelWidth, sizeof(col));
    for (int c = 0; c < kPanelWidth; ++c) tile[c] *= col[c];
  }
}

template <bool kNv>
void Gemv(const float* a, int64_t k, const void* packed, int64_t panel_begin,
          int64_t panel_end, Epilogue epilogue, int64_t n_out, float* out) {
  // Scratch slot A holds packed activations in the fp32 tiles: here the
  // quantised row, 32-byte aligned.
  const auto raw = reinterpret_cast<uintptr_t>(ThreadScratch(
      kScratchA, static_cast<size_t>(QuantisedBytes(MxBlocks(k)) + 32) / 4));
  const QuantisedRow row =
      QuantiseRow(a, k, reinterpret_cast<uint8_t*>((raw + 31) / 32 * 32));
  const Tables t;
  const auto* p = static_cast<const uint8_t*>(packed);
  const int64_t stride = kNv ? Nvfp4PanelBytes(k) : Mxfp4PanelBytes(k);
  alignas(32) float tile[kPanelWidth];
  for (int64_t i = panel_begin; i < panel_end; ++i) {
    const uint8_t* panel = p + i * stride;
    Panel<kNv>(t, row, k, panel, panel + stride, tile);
    StoreTile(tile, 1, i, epilogue, n_out, &out);
  }
}

}  // namespace

void Mxfp4GemvAvx2(const float* a, int64_t k, const void* packed,
                   int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                   int64_t n_out, float* out) {
  Gemv<false>(a, k, packed, panel_begin, panel_end, epilogue, n_out, out);
}

void Nvfp4GemvAvx2(const float* a, int64_t k, const void* packed,
                   int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                   int64_t n_out, float* out) {
  Gemv<true>(a, k, packed, panel_begin, panel_end, epilogue, n_out, out);
}

}  // namespace moe::kernels::cpu::internal
