// One check that the CPU and CUDA tests share: a bf16 request given to
// LocalMoe::ForwardBf16 gives the bits of the fp32 request holding the same
// rows widened, routing included, on any device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/reference_moe.h"

namespace moe::testing {

inline void ExpectBf16ForwardGivesWidenedRowsBits(const MoeLayerConfig& c,
                                                  int64_t n, uint64_t seed,
                                                  const std::string& device,
                                                  WeightDType weights,
                                                  int64_t max_tokens) {
  auto g = RandomCase(c, n, seed);
  auto src = MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, device, weights, 1, max_tokens);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<uint16_t> x16(n * c.hidden);
  std::vector<float> x32(n * c.hidden);
  for (size_t i = 0; i < x16.size(); ++i) {
    x16[i] = F32ToBf16(g.x[i]);
    x32[i] = Bf16ToF32(x16[i]);
  }
  std::vector<float> a(n * c.hidden), b(n * c.hidden);
  Routing ra, rb;
  ASSERT_TRUE((*moe)->Forward(0, x32.data(), {.n = n}, a.data(), &ra).ok());
  ASSERT_TRUE((*moe)->ForwardBf16(0, x16.data(), {.n = n}, b.data(), &rb).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ra.expert, rb.expert);
}

}  // namespace moe::testing
