// The machine's physical compute limit, measured: fp32 FMA throughput of a
// register-only loop (no memory traffic) on every thread, at a given ISA.
// Reported next to OpenBLAS's sgemm, whose own CPU detection can fall back
// to slow generic kernels on CPUs it does not know.
#pragma once

#include <string>

namespace moe::bench {

// GFLOP/s (2 per FMA lane) at `isa` ("avx512", "avx2" or "generic": the
// kernels' names, kernels/cpu/packed_gemm.h GemmIsaName) on `threads`
// threads; 0 when the CPU lacks the ISA.
double FmaPeakGflops(const std::string& isa, int threads);

// The OpenBLAS kernel set in use ("SkylakeX", "Haswell", "Prescott", ...).
std::string OpenblasCore();

}  // namespace moe::bench
