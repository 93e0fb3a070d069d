// A test parameterised by a CPU kernel ISA name ("generic", "avx2",
// "avx512"): switches the packed GEMM to it for the test, skipping when the
// CPU lacks it, and restores the original afterwards.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu {

class IsaParamTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    original_ = GemmIsaName();
    if (!SetGemmIsa(GetParam())) GTEST_SKIP() << "CPU lacks " << GetParam();
  }
  void TearDown() override { SetGemmIsa(original_.c_str()); }
  std::string original_;
};

// The ISAs every such test runs on (each skipped where the CPU lacks it).
#define MOE_INSTANTIATE_ISA_TESTS(suite)                          \
  INSTANTIATE_TEST_SUITE_P(                                       \
      Isa, suite, ::testing::Values("generic", "avx2", "avx512"), \
      [](const auto& info) { return std::string(info.param); })

}  // namespace moe::kernels::cpu
