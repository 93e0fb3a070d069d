// The row transport chosen at plan time (engine/row_transport.h): for every
// dispatch, row type and whether rows cross ranks, which leg packs, which
// exchanges, through which buffers and as which wire elements.
#include "engine/row_transport.h"

#include "core/fp8_rows.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr int64_t kH = 200;

TEST(RowTransport, RowTypeRowsCrossAsTheyAre) {
  const RowTransport t =
      PlanRowTransport(DispatchDType::kRowType, ElementType::kF32, kH, true);
  EXPECT_FALSE(t.packs());
  EXPECT_FALSE(t.rows_in_place);
  EXPECT_TRUE(t.dispatch.exchange);
  EXPECT_EQ(t.dispatch.send, EpBuffer::kSend);
  EXPECT_EQ(t.dispatch.recv, EpBuffer::kRecv);
  EXPECT_EQ(t.dispatch.rows, EpBuffer::kRecv);
  EXPECT_EQ(t.dispatch.wire_type, ElementType::kF32);
  EXPECT_EQ(t.dispatch.wire_row_elems, kH);
  EXPECT_TRUE(t.combine.exchange);
  EXPECT_EQ(t.combine.send, EpBuffer::kOut);
  EXPECT_EQ(t.combine.recv, EpBuffer::kBack);
  EXPECT_EQ(t.combine.rows, EpBuffer::kBack);
  EXPECT_EQ(t.combine.wire_type, ElementType::kF32);
  EXPECT_EQ(t.output_type, ElementType::kF32);
}

// World size 1 (the plan says row type there) and unpacked direct steps:
// nothing moves, the experts read the gathered rows where they are and the
// sum reads the outputs where the experts wrote them.
TEST(RowTransport, RowsThatStayMoveNowhere) {
  for (ElementType row : {ElementType::kF32, ElementType::kBF16}) {
    const RowTransport t =
        PlanRowTransport(DispatchDType::kRowType, row, kH, false);
    EXPECT_FALSE(t.packs());
    EXPECT_TRUE(t.rows_in_place);
    EXPECT_FALSE(t.dispatch.exchange);
    EXPECT_FALSE(t.combine.exchange);
    EXPECT_EQ(t.dispatch.rows, EpBuffer::kSend);
    EXPECT_EQ(t.combine.rows, EpBuffer::kOut);
    EXPECT_EQ(t.output_type, row);
  }
}

// FP8 rows of an fp32 backend: packed into bytes, exchanged, unpacked into
// kRecv; the outputs come home as bf16.
TEST(RowTransport, Fp8RowsCrossAsBytesAndOutputsAsBf16) {
  const RowTransport t =
      PlanRowTransport(DispatchDType::kFp8, ElementType::kF32, kH, true);
  EXPECT_TRUE(t.packs());
  EXPECT_FALSE(t.rows_in_place);
  EXPECT_TRUE(t.dispatch.encode);
  EXPECT_TRUE(t.dispatch.decode);
  EXPECT_EQ(t.dispatch.send, EpBuffer::kSendPacked);
  EXPECT_EQ(t.dispatch.recv, EpBuffer::kRecvPacked);
  EXPECT_EQ(t.dispatch.rows, EpBuffer::kRecv);
  EXPECT_EQ(t.dispatch.wire_type, ElementType::kU8);
  EXPECT_EQ(t.dispatch.wire_row_elems, Fp8RowBytes(kH));
  EXPECT_TRUE(t.combine.encode);
  EXPECT_FALSE(t.combine.decode);  // the sum reads bf16
  EXPECT_EQ(t.combine.send, EpBuffer::kOutPacked);
  EXPECT_EQ(t.combine.recv, EpBuffer::kBackPacked);
  EXPECT_EQ(t.combine.rows, EpBuffer::kBackPacked);
  EXPECT_EQ(t.combine.wire_type, ElementType::kBF16);
  EXPECT_EQ(t.combine.wire_row_elems, kH);
  EXPECT_EQ(t.output_type, ElementType::kBF16);
}

// A direct step packs and unpacks as the all-to-all would, so that its
// outputs have the same bits, but exchanges nothing: rows are unpacked where
// they were gathered, and the sum reads the packed outputs where they were
// packed.
TEST(RowTransport, PackedRowsThatStayStillRound) {
  const RowTransport t =
      PlanRowTransport(DispatchDType::kBf16, ElementType::kF32, kH, false);
  EXPECT_TRUE(t.dispatch.encode);
  EXPECT_TRUE(t.dispatch.decode);
  EXPECT_FALSE(t.dispatch.exchange);
  EXPECT_FALSE(t.rows_in_place);
  EXPECT_EQ(t.dispatch.send, EpBuffer::kSendPacked);
  EXPECT_EQ(t.dispatch.recv, EpBuffer::kSendPacked);
  EXPECT_EQ(t.dispatch.rows, EpBuffer::kSend);
  EXPECT_EQ(t.dispatch.wire_row_elems, 2 * kH);
  EXPECT_TRUE(t.combine.encode);
  EXPECT_FALSE(t.combine.exchange);
  EXPECT_EQ(t.combine.rows, EpBuffer::kOutPacked);
  EXPECT_EQ(t.output_type, ElementType::kBF16);
}

// A bf16 backend's rows already travel as bf16: nothing to pack. FP8 rows
// are packed, but its outputs go home in its own row type.
TEST(RowTransport, Bf16BackendPacksOnlyFp8Rows) {
  RowTransport t =
      PlanRowTransport(DispatchDType::kBf16, ElementType::kBF16, kH, true);
  EXPECT_FALSE(t.packs());
  EXPECT_EQ(t.dispatch.wire_type, ElementType::kBF16);
  EXPECT_EQ(t.dispatch.wire_row_elems, kH);
  EXPECT_EQ(t.dispatch.rows, EpBuffer::kRecv);
  t = PlanRowTransport(DispatchDType::kFp8, ElementType::kBF16, kH, true);
  EXPECT_TRUE(t.dispatch.encode);
  EXPECT_FALSE(t.combine.encode);
  EXPECT_EQ(t.combine.send, EpBuffer::kOut);
  EXPECT_EQ(t.combine.recv, EpBuffer::kBack);
  EXPECT_EQ(t.combine.wire_type, ElementType::kBF16);
  EXPECT_EQ(t.output_type, ElementType::kBF16);
}

TEST(RowTransport, DispatchRowBytesAndOutputPacking) {
  EXPECT_EQ(DispatchRowBytes(DispatchDType::kRowType, ElementType::kF32, kH),
            4 * kH);
  EXPECT_EQ(DispatchRowBytes(DispatchDType::kRowType, ElementType::kBF16, kH),
            2 * kH);
  EXPECT_EQ(DispatchRowBytes(DispatchDType::kBf16, ElementType::kF32, kH),
            2 * kH);
  EXPECT_EQ(DispatchRowBytes(DispatchDType::kFp8, ElementType::kF32, kH),
            Fp8RowBytes(kH));
  EXPECT_TRUE(PacksOutputs(DispatchDType::kFp8, ElementType::kF32));
  EXPECT_FALSE(PacksOutputs(DispatchDType::kRowType, ElementType::kF32));
  EXPECT_FALSE(PacksOutputs(DispatchDType::kFp8, ElementType::kBF16));
}

}  // namespace
}  // namespace moe
