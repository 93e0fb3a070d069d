// Internal: the per-ISA GEMM entry points and their shared scratch.
#pragma once

#include <cstddef>

#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu::internal {

// Same contract as GemmPanels; each lives in a translation unit built with
// its own target flags.
using GemmPanelsFn = void (*)(const float* const* a_rows, int64_t m, int64_t k,
                              const void* packed, WeightFormat format,
                              int64_t panel_begin, int64_t panel_end,
                              Epilogue epilogue, int64_t n_out,
                              float* const* out_rows);

void GemmPanelsAvx512(const float* const* a_rows, int64_t m, int64_t k,
                      const void* packed, WeightFormat format,
                      int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                      int64_t n_out, float* const* out_rows);
void GemmPanelsAvx2(const float* const* a_rows, int64_t m, int64_t k,
                    const void* packed, WeightFormat format,
                    int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                    int64_t n_out, float* const* out_rows);
void GemmPanelsGeneric(const float* const* a_rows, int64_t m, int64_t k,
                       const void* packed, WeightFormat format,
                       int64_t panel_begin, int64_t panel_end,
                       Epilogue epilogue, int64_t n_out,
                       float* const* out_rows);

// One-row MXFP4 GEMMs on AVX2, by integer dot products against the row
// quantised to 22 bits per 32-block (mxfp4_gemv_avx2.cc); GemmPanelsAvx2
// sends them there. Same contract as GemmPanels with m = 1.
void Mxfp4GemvAvx2(const float* a, int64_t k, const void* packed,
                   int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                   int64_t n_out, float* out);
// The same for NVFP4 panels (each 32-block's two E4M3-scaled halves summed
// apart, the column scales applied at the end).
void Nvfp4GemvAvx2(const float* a, int64_t k, const void* packed,
                   int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                   int64_t n_out, float* out);

// Per-thread scratch buffers, grown on demand and then reused (no
// steady-state allocation). Slot 0 holds packed A, slot 1 partial C tiles,
// slot 2 a K block of FP8 weights decoded to fp32 for several row tiles.
// Lives in the generic translation unit so the ISA units instantiate no
// standard-library code.
enum ScratchSlot { kScratchA = 0, kScratchC = 1, kScratchW = 2 };
float* ThreadScratch(ScratchSlot slot, size_t floats);

}  // namespace moe::kernels::cpu::internal
