#include "kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "kernels/cpu/gemm_isa.h"

namespace moe::kernels::cpu {
namespace {

template <typename T>
void PackRows(const T* const* rows, int64_t n, int64_t k, int64_t row_len,
              T* packed) {
  const int64_t panels = NumPanels(n);
  for (int64_t p = 0; p < panels; ++p) {
    T* dst = packed + p * kPanelWidth * k;
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      const T* src = row < n ? rows[row] : nullptr;
      for (int64_t kk = 0; kk < k; ++kk) {
        dst[kk * kPanelWidth + c] =
            src != nullptr && kk < row_len ? src[kk] : T{0};
      }
    }
  }
}

// The code bytes of one MXFP4 or NVFP4 panel (both formats lay them out
// alike, see Mxfp4PanelBytes) from its 32 rows of code pairs (nullptr: a
// zero row); codes at or past row_len are zero.
void PackFp4Codes(const uint8_t* const* panel_rows, int64_t k, int64_t row_len,
                  uint8_t* codes) {
  for (int64_t c = 0; c < kPanelWidth; ++c) {
    const uint8_t* src = panel_rows[c];
    // Column c's nibble of each step's byte c % 16.
    const int shift = c < kPanelWidth / 2 ? 0 : 4;
    const int64_t byte = c % (kPanelWidth / 2);
    for (int64_t kk = 0; kk < k; ++kk) {
      uint8_t code = 0;
      if (src != nullptr && kk < row_len) {
        code = (src[kk / 2] >> (kk % 2 == 0 ? 0 : 4)) & 0xf;
      }
      uint8_t& dst = codes[kk * (kPanelWidth / 2) + byte];
      dst = static_cast<uint8_t>((dst & (0xf0 >> shift)) | (code << shift));
    }
  }
}

struct IsaChoice {
  internal::GemmPanelsFn fn;
  const char* name;
};

bool CpuHas(std::string_view isa) {
  __builtin_cpu_init();
  if (isa == "avx512") {
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  }
  if (isa == "avx2") {
    // F16C (vcvtph2ps) widens FP8 weights; every AVX2 CPU has it.
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }
  return isa == "generic";
}

IsaChoice Choose(std::string_view isa) {
  if (isa == "avx512") return {internal::GemmPanelsAvx512, "avx512"};
  if (isa == "avx2") return {internal::GemmPanelsAvx2, "avx2"};
  return {internal::GemmPanelsGeneric, "generic"};
}

IsaChoice& Current() {
  static IsaChoice choice = CpuHas("avx512") ? Choose("avx512")
                            : CpuHas("avx2") ? Choose("avx2")
                                             : Choose("generic");
  return choice;
}

}  // namespace

void PackRowsF32(const float* const* rows, int64_t n, int64_t k,
                 int64_t row_len, float* packed) {
  PackRows(rows, n, k, row_len, packed);
}

void PackRowsBF16(const uint16_t* const* rows, int64_t n, int64_t k,
                  int64_t row_len, uint16_t* packed) {
  PackRows(rows, n, k, row_len, packed);
}

void PackRowsFP8(const uint8_t* const* rows, const float* const* row_scales,
                 int64_t n, int64_t k, int64_t row_len, void* packed) {
  const int64_t panels = NumPanels(n);
  const int64_t blocks = Fp8ScaleBlocks(k);
  for (int64_t p = 0; p < panels; ++p) {
    auto* codes = static_cast<uint8_t*>(packed) + p * Fp8PanelBytes(k);
    auto* scales = reinterpret_cast<float*>(codes + kPanelWidth * k);
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      const uint8_t* src = row < n ? rows[row] : nullptr;
      for (int64_t kk = 0; kk < k; ++kk) {
        codes[kk * kPanelWidth + c] =
            src != nullptr && kk < row_len ? src[kk] : uint8_t{0};
      }
      for (int64_t q = 0; q < blocks; ++q) {
        const int64_t k0 = q * kFp8BlockK;
        const int64_t k1 = std::min(row_len, k0 + kFp8BlockK);
        // 2^8 times the scale: exact (a power of two), see Fp8PanelBytes.
        float s =
            src != nullptr && k0 < row_len ? row_scales[row][q] * 256.0f : 0.0f;
        // A NaN code (0x7f, 0xff) makes its column's block scale NaN: the
        // output column is NaN either way, and the kernels need not test
        // every code for NaN.
        for (int64_t kk = k0; src != nullptr && kk < k1; ++kk) {
          if ((src[kk] & 0x7f) == 0x7f) {
            s = std::numeric_limits<float>::quiet_NaN();
          }
        }
        scales[q * kPanelWidth + c] = s;
      }
    }
  }
}

void PackRowsMXFP4(const uint8_t* const* rows, const uint8_t* const* row_scales,
                   int64_t n, int64_t k, int64_t row_len, void* packed) {
  const int64_t panels = NumPanels(n);
  const int64_t blocks = MxBlocks(k);
  for (int64_t p = 0; p < panels; ++p) {
    auto* codes = static_cast<uint8_t*>(packed) + p * Mxfp4PanelBytes(k);
    uint8_t* scales = codes + kPanelWidth / 2 * k;
    const uint8_t* panel_rows[kPanelWidth];
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      panel_rows[c] = row < n ? rows[row] : nullptr;
    }
    PackFp4Codes(panel_rows, k, row_len, codes);
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      const uint8_t* src = row < n ? rows[row] : nullptr;
      for (int64_t q = 0; q < blocks; ++q) {
        scales[q * kPanelWidth + c] =
            src != nullptr && q * kMxBlock < row_len ? row_scales[row][q] : 0;
      }
    }
  }
}

void PackRowsNVFP4(const uint8_t* const* rows, const uint8_t* const* row_scales,
                   const float* row_globals, int64_t n, int64_t k,
                   int64_t row_len, void* packed) {
  const int64_t panels = NumPanels(n);
  const int64_t blocks = NvBlocks(k);
  for (int64_t p = 0; p < panels; ++p) {
    auto* codes = static_cast<uint8_t*>(packed) + p * Nvfp4PanelBytes(k);
    uint8_t* scales = codes + kPanelWidth / 2 * k;
    uint8_t* column_scales = scales + blocks * kPanelWidth;
    // The code bytes are laid out as MXFP4's.
    const uint8_t* panel_rows[kPanelWidth];
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      panel_rows[c] = row < n ? rows[row] : nullptr;
    }
    PackFp4Codes(panel_rows, k, row_len, codes);
    for (int64_t c = 0; c < kPanelWidth; ++c) {
      const int64_t row = p * kPanelWidth + c;
      const bool real = row < n && rows[row] != nullptr;
      for (int64_t q = 0; q < blocks; ++q) {
        scales[q * kPanelWidth + c] =
            real && q * kNvBlock < row_len ? row_scales[row][q] : 0;
      }
      // The global times 2^8: the kernels read E4M3 scales as their values
      // times 2^-8 (see Nvfp4PanelBytes). Exact unless it overflows, which
      // a finite product of codes and scales would too.
      const float col = real ? row_globals[row] * 256.0f : 0.0f;
      std::memcpy(column_scales + c * sizeof(float), &col, sizeof(col));
    }
  }
}

void FusedGateUpRowOrder(int64_t inter, int64_t* order) {
  const int64_t padded = PaddedInter(inter);
  for (int64_t b = 0; b < padded / kHalfPanel; ++b) {
    for (int64_t c = 0; c < kHalfPanel; ++c) {
      const int64_t j = b * kHalfPanel + c;
      order[b * kPanelWidth + c] = j < inter ? j : INT64_MIN;
      order[b * kPanelWidth + kHalfPanel + c] = j < inter ? -1 - j : INT64_MIN;
    }
  }
}

void GemmPanels(const float* const* a_rows, int64_t m, int64_t k,
                const void* packed, WeightFormat format, int64_t panel_begin,
                int64_t panel_end, Epilogue epilogue, int64_t n_out,
                float* const* out_rows) {
  if (m <= 0 || panel_begin >= panel_end) return;
  Current().fn(a_rows, m, k, packed, format, panel_begin, panel_end, epilogue,
               n_out, out_rows);
}

const char* GemmIsaName() { return Current().name; }

bool SetGemmIsa(const char* name) {
  if (!CpuHas(name)) return false;
  Current() = Choose(name);
  return true;
}

namespace internal {

float* ThreadScratch(ScratchSlot slot, size_t floats) {
  thread_local std::vector<float> scratch[3];
  std::vector<float>& s = scratch[slot];
  if (s.size() < floats) s.resize(floats);
  return s.data();
}

}  // namespace internal
}  // namespace moe::kernels::cpu
