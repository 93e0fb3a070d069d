// Weight-stationary GEMM over pre-packed weights: C = A W^T, A given as row
// pointers (so permute/unpermute gathers fuse into the GEMM), W packed once at
// load time into panels of 32 output columns with K contiguous per panel.
// Weights are fp32, bf16 (widened to fp32 in registers) or FP8 e4m3 with one
// fp32 scale per 128-wide block of K per output column (converted to fp32 and
// scaled in registers), or MXFP4 (E2M1 codes, two per byte, with one E8M0
// scale per 32 K values per output column; widened by a table lookup in
// registers), or NVFP4 (the same code bytes with one E4M3 scale per 16 K
// values per output column and one fp32 global scale per column); A and C
// are fp32, and so is the accumulation.
// Pure compute: raw pointers and sizes, single-threaded per call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/mxfp4_rule.h"
#include "kernels/nvfp4_rule.h"

namespace moe::kernels::cpu {

enum class WeightFormat : int32_t {
  kF32 = 0,
  kBF16 = 1,
  kFP8 = 2,
  kMXFP4 = 3,
  kNVFP4 = 4,
};

// Output columns per packed panel.
inline constexpr int64_t kPanelWidth = 32;
// In a fused gate/up panel the first 16 columns are gate rows, the next 16
// the matching up rows.
inline constexpr int64_t kHalfPanel = 16;

enum class Epilogue : int32_t {
  // out[i][c] = C[i][c] for c in [32p, min(32p + 32, n_out)).
  kStore = 0,
  // Fused gate/up panels: out[i][c] = silu(C_gate[i][c]) * C_up[i][c] for
  // c in [16p, 16p + 16).
  kSwiGLU = 1,
};

inline int64_t NumPanels(int64_t n) {
  return (n + kPanelWidth - 1) / kPanelWidth;
}
// Elements of the packed form of an [n, k] weight.
inline int64_t PackedElements(int64_t n, int64_t k) {
  return NumPanels(n) * kPanelWidth * k;
}
// The intermediate width of a fused gate/up weight, padded to whole halves.
inline int64_t PaddedInter(int64_t inter) {
  return (inter + kHalfPanel - 1) / kHalfPanel * kHalfPanel;
}
inline size_t WeightElementSize(WeightFormat f) {
  return f == WeightFormat::kF32 ? 4 : f == WeightFormat::kBF16 ? 2 : 1;
}

// FP8 weights: the depth of a scale block along K (DeepSeek-V3's 128x128
// blocks; a packed panel needs one scale per column per K block).
inline constexpr int64_t kFp8BlockK = 128;
inline int64_t Fp8ScaleBlocks(int64_t k) {
  return (k + kFp8BlockK - 1) / kFp8BlockK;
}
// Bytes of one FP8 panel: k x 32 e4m3 codes in the same order as the other
// formats, then Fp8ScaleBlocks(k) x 32 fp32 scales (block-major, column
// minor). The stored scales are the block scales times 2^8: the kernels read
// an e4m3 code as an fp16 bit pattern whose value is the code's / 2^8.
inline int64_t Fp8PanelBytes(int64_t k) {
  return kPanelWidth * k + Fp8ScaleBlocks(k) * kPanelWidth * 4;
}
// Bytes of one MXFP4 panel: k steps of 16 bytes, byte c of a step holding
// column c's E2M1 code in its low nibble and column c + 16's in its high
// nibble (so each half widens with one table lookup: the low nibbles, or
// the bytes shifted right by 4), then MxBlocks(k) x 32 E8M0 scale bytes
// (block-major, column minor) for the K values [32q, 32q + 32). K need not
// be a multiple of 32: the last block is shorter (zero codes past row_len).
// 4.25 bits a weight when k is a multiple of 32: 0.27x of bf16.
inline int64_t Mxfp4PanelBytes(int64_t k) {
  return kPanelWidth / 2 * k + MxBlocks(k) * kPanelWidth;
}
// Bytes of one NVFP4 panel: the MXFP4 panel's k steps of code bytes, then
// NvBlocks(k) x 32 E4M3 scale bytes (block-major, column minor) for the K
// values [16q, 16q + 16), then 32 fp32 column scales: each column's tensor
// global scale times 2^8. The kernels widen an E4M3 byte as FP8 panels do
// (an fp16 pattern worth the code / 2^8) and multiply each output column by
// its column scale once, after the K sum: a fused gate/up panel's gate and
// up halves have different global scales. 4.5 bits a weight when k is a
// multiple of 16 (plus 128 bytes a panel): 0.28x of bf16.
inline constexpr int64_t kNvColumnScaleBytes = kPanelWidth * 4;
inline int64_t Nvfp4PanelBytes(int64_t k) {
  return kPanelWidth / 2 * k + NvBlocks(k) * kPanelWidth + kNvColumnScaleBytes;
}
// Bytes of the packed form of an [n, k] weight in any format.
inline int64_t PackedBytes(WeightFormat f, int64_t n, int64_t k) {
  if (f == WeightFormat::kMXFP4) return NumPanels(n) * Mxfp4PanelBytes(k);
  if (f == WeightFormat::kNVFP4) return NumPanels(n) * Nvfp4PanelBytes(k);
  return f == WeightFormat::kFP8
             ? NumPanels(n) * Fp8PanelBytes(k)
             : PackedElements(n, k) *
                   static_cast<int64_t>(WeightElementSize(f));
}

// Packs an [n, k] weight given as row pointers (nullptr = a zero row) of
// `row_len` <= k valid elements each (the rest of k is zero padding) into
// NumPanels(n) panels: fp32 values, or bf16 bits.
void PackRowsF32(const float* const* rows, int64_t n, int64_t k,
                 int64_t row_len, float* packed);
void PackRowsBF16(const uint16_t* const* rows, int64_t n, int64_t k,
                  int64_t row_len, uint16_t* packed);
// FP8: rows of e4m3 codes, and for each row its block scales,
// row_scales[r][q] for the columns [128q, 128q + 128) (only q with 128q <
// row_len are read). Writes PackedBytes(kFP8, n, k) bytes. A NaN code
// makes its column's block scale NaN (the output column is NaN either way):
// the kernels read a code as an fp16 pattern (see Fp8PanelBytes), where a
// NaN code alone would read as +-480 / 2^8.
void PackRowsFP8(const uint8_t* const* rows, const float* const* row_scales,
                 int64_t n, int64_t k, int64_t row_len, void* packed);
// MXFP4: rows of E2M1 code pairs (element j of row r in rows[r][j / 2],
// low nibble for even j) and for each row its E8M0 scale bytes,
// row_scales[r][q] for the elements [32q, 32q + 32) (only q with 32q <
// row_len are read). Elements at or past row_len pack as zero codes, and
// their blocks' scales as 0 (the packed value is 0 either way). Scale bytes
// must not be 255 (NaN): the loader refuses those. Writes
// PackedBytes(kMXFP4, n, k) bytes.
void PackRowsMXFP4(const uint8_t* const* rows, const uint8_t* const* row_scales,
                   int64_t n, int64_t k, int64_t row_len, void* packed);
// NVFP4: rows of E2M1 code pairs as for MXFP4, for each row its E4M3 scale
// bytes, row_scales[r][q] for the elements [16q, 16q + 16) (only q with 16q
// < row_len are read), and its tensor's global scale, row_globals[r].
// Elements at or past row_len pack as zero codes and zero scales, padding
// rows (nullptr) as zero codes, scales and column scales. Scale bytes must
// not be E4M3 NaN (0x7f, 0xff): the loader refuses those. Writes
// PackedBytes(kNVFP4, n, k) bytes.
void PackRowsNVFP4(const uint8_t* const* rows, const uint8_t* const* row_scales,
                   const float* row_globals, int64_t n, int64_t k,
                   int64_t row_len, void* packed);
// Row order of a fused gate/up weight of intermediate size `inter`: for each
// half-panel block b, 16 gate rows then 16 up rows. Writes PaddedInter*2
// entries: the row index into gate (>= 0), into up (encoded as -1 - row), or
// INT64_MIN for padding.
void FusedGateUpRowOrder(int64_t inter, int64_t* order);

// Computes panels [panel_begin, panel_end) of A W^T for `m` rows of A (each
// `k` long) and writes them through `epilogue` into `out_rows`.
void GemmPanels(const float* const* a_rows, int64_t m, int64_t k,
                const void* packed, WeightFormat format, int64_t panel_begin,
                int64_t panel_end, Epilogue epilogue, int64_t n_out,
                float* const* out_rows);

// The instruction set the dispatcher chose: "avx512", "avx2" or "generic".
const char* GemmIsaName();
// Forces an instruction set ("avx512", "avx2", "generic"); false when the CPU
// lacks it. For tests that compare the paths.
bool SetGemmIsa(const char* name);

}  // namespace moe::kernels::cpu
