// proto/tensor_codec: the checked view of a wire tensor, row decoding, and
// encoding, against the one-value conversions of core/dtype.
#include "proto/tensor_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<float> Values(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + i % 7);
  }
  return v;
}

TEST(TensorCodec, EncodeMatchesTheOneValueConversionsAndDecodesBack) {
  const int64_t rows = 5, cols = 33;
  const std::vector<float> v = Values(rows * cols);
  for (auto dtype : {moe::v1::F32, moe::v1::BF16, moe::v1::F16}) {
    moe::v1::Tensor t;
    EncodeMatrix(v.data(), rows, cols, dtype, &t);
    ASSERT_EQ(t.dtype(), dtype);
    ASSERT_EQ(t.data().size(), v.size() * DTypeSize(*FromWireDType(dtype)));
    std::vector<float> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      want[i] = dtype == moe::v1::BF16  ? Bf16ToF32(F32ToBf16(v[i]))
                : dtype == moe::v1::F16 ? F16ToF32(F32ToF16(v[i]))
                                        : v[i];
    }
    auto view = CheckMatrix(t, "x", cols, /*require_finite=*/true);
    ASSERT_TRUE(view.ok()) << view.status();
    // Rows 2..3 alone land where they belong.
    std::vector<float> part(2 * cols);
    DecodeRows(*view, 2, 2, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), want.data() + 2 * cols,
                             part.size() * sizeof(float)));
    auto whole = DecodeMatrix(t, "x", cols, true);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(whole->data, want);
  }
}

TEST(TensorCodec, CheckNamesTheFieldAndWhatWasExpected) {
  const std::vector<float> v = Values(6);
  moe::v1::Tensor t;
  EncodeMatrix(v.data(), 2, 3, moe::v1::BF16, &t);
  auto wrong_cols = CheckMatrix(t, "hidden_states", 4, true);
  ASSERT_FALSE(wrong_cols.ok());
  EXPECT_NE(wrong_cols.status().message().find(
                "hidden_states.shape[1]: expected hidden size 4, got 3"),
            std::string::npos)
      << wrong_cols.status();
  moe::v1::Tensor short_data = t;
  short_data.mutable_data()->pop_back();
  auto truncated = CheckMatrix(short_data, "hidden_states", 3, true);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("hidden_states.data: expected "
                                              "12 bytes (BF16 [2, 3]), got 11"),
            std::string::npos)
      << truncated.status();
  std::vector<float> bad = v;
  bad[5] = std::numeric_limits<float>::infinity();
  EncodeMatrix(bad.data(), 2, 3, moe::v1::BF16, &t);
  auto inf = CheckMatrix(t, "hidden_states", 3, true);
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("non-finite value at [1, 2]"),
            std::string::npos)
      << inf.status();
  EXPECT_TRUE(CheckMatrix(t, "hidden_states", 3, false).ok());
}

}  // namespace
}  // namespace moe
