// The CPU's row codec (engine/cpu_row_codec.h): the rows it packs (x's by
// the plan's source rows, or the gathered ones), the bf16 and FP8 forms it
// packs them in, and the unpacked rows and outputs, against core's own
// conversions.
#include "engine/cpu_row_codec.h"

#include <vector>

#include "core/dtype.h"
#include "core/fp8_rows.h"
#include "engine/row_transport.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr int64_t kH = 130;  // one full and one narrow FP8 group

std::vector<float> Rows(int64_t n, float base) {
  std::vector<float> r(n * kH);
  for (int64_t i = 0; i < n * kH; ++i) r[i] = base + 0.37f * (i % 97) - 9.0f;
  return r;
}

TEST(CpuRowCodec, PacksXsRowsByTheirSourceOrTheGatheredRows) {
  const std::vector<float> x = Rows(3, 1.0f), gathered = Rows(2, 50.0f);
  EpStepInput in;
  in.rows = x.data();
  EpPlan p;
  p.dispatch = DispatchDType::kBf16;
  p.sent = 2;
  p.src_row = {2, 0};
  std::vector<uint16_t> packed(2 * kH), want(2 * kH);
  CpuRowCodec from_x(1, kH, /*rows_from_x=*/true);
  ASSERT_TRUE(from_x.PackRows(in, p, gathered.data(), packed.data()).ok());
  ConvertFromF32(DType::kBF16, x.data() + 2 * kH, kH, want.data());
  ConvertFromF32(DType::kBF16, x.data(), kH, want.data() + kH);
  EXPECT_EQ(packed, want);
  CpuRowCodec from_gathered(1, kH, /*rows_from_x=*/false);
  ASSERT_TRUE(
      from_gathered.PackRows(in, p, gathered.data(), packed.data()).ok());
  ConvertFromF32(DType::kBF16, gathered.data(), 2 * kH, want.data());
  EXPECT_EQ(packed, want);
}

TEST(CpuRowCodec, Fp8RowsRoundTripAsCoreQuantisesThem) {
  const std::vector<float> rows = Rows(4, 3.0f);
  EpStepInput in;
  EpPlan p;
  p.dispatch = DispatchDType::kFp8;
  p.sent = p.arrived = 4;
  const int64_t bytes = Fp8RowBytes(kH);
  std::vector<uint8_t> packed(4 * bytes), want(4 * bytes);
  CpuRowCodec codec(2, kH, /*rows_from_x=*/false);
  ASSERT_TRUE(codec.PackRows(in, p, rows.data(), packed.data()).ok());
  QuantizeFp8Rows(rows.data(), 4, kH, want.data());
  EXPECT_EQ(packed, want);
  std::vector<float> back(4 * kH), want_back(4 * kH);
  ASSERT_TRUE(codec.UnpackRows(p, packed.data(), back.data()).ok());
  DequantizeFp8Rows(want.data(), 4, kH, want_back.data());
  EXPECT_EQ(back, want_back);
  EXPECT_NE(back, rows);  // rounded
}

TEST(CpuRowCodec, OutputsGoHomeAsBf16AndRowTypeIsNeverPacked) {
  const std::vector<float> out = Rows(3, -2.0f);
  EpPlan p;
  p.received = 3;
  std::vector<uint16_t> packed(3 * kH), want(3 * kH);
  CpuRowCodec codec(1, kH, false);
  ASSERT_TRUE(codec.PackOutputs(p, out.data(), packed.data()).ok());
  ConvertFromF32(DType::kBF16, out.data(), 3 * kH, want.data());
  EXPECT_EQ(packed, want);
  p.dispatch = DispatchDType::kRowType;
  EpStepInput in;
  EXPECT_EQ(codec.PackRows(in, p, out.data(), packed.data()).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(codec.UnpackRows(p, packed.data(), nullptr).code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace moe
