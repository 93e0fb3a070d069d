#include "engine/row_transport.h"

#include "core/fp8_rows.h"

namespace moe {

bool PacksOutputs(DispatchDType dispatch, ElementType row_type) {
  return dispatch != DispatchDType::kRowType && row_type == ElementType::kF32;
}

int64_t DispatchRowBytes(DispatchDType dispatch, ElementType row_type,
                         int64_t hidden) {
  switch (dispatch) {
    case DispatchDType::kBf16:
      return 2 * hidden;
    case DispatchDType::kFp8:
      return Fp8RowBytes(hidden);
    case DispatchDType::kRowType:
      break;
  }
  return static_cast<int64_t>(DTypeSize(row_type)) * hidden;
}

const char* DispatchDTypeName(DispatchDType dispatch) {
  switch (dispatch) {
    case DispatchDType::kBf16:
      return "bf16";
    case DispatchDType::kFp8:
      return "fp8";
    case DispatchDType::kRowType:
      break;
  }
  return "row type";
}

RowTransport PlanRowTransport(DispatchDType dispatch, ElementType row_type,
                              int64_t hidden, bool crosses) {
  RowTransport t;
  // Rows are packed for the dispatch unless they already travel as asked
  // (bf16 rows of a bf16 backend). Packed rows cross as opaque bytes and
  // are unpacked into the row type for the experts.
  const bool packed =
      dispatch == DispatchDType::kFp8 ||
      (dispatch == DispatchDType::kBf16 && row_type != ElementType::kBF16);
  RowLeg& d = t.dispatch;
  d.encode = d.decode = packed;
  d.exchange = crosses;
  d.send = packed ? EpBuffer::kSendPacked : EpBuffer::kSend;
  d.recv = !crosses ? d.send : packed ? EpBuffer::kRecvPacked : EpBuffer::kRecv;
  // Rows that stay are unpacked where they were gathered.
  d.rows = !packed ? d.recv : crosses ? EpBuffer::kRecv : EpBuffer::kSend;
  d.wire_type = packed ? ElementType::kU8 : row_type;
  d.wire_row_elems =
      packed ? DispatchRowBytes(dispatch, row_type, hidden) : hidden;
  // A packed dispatch comes home packed too: fp32 expert outputs travel as
  // bf16 (DeepEP's FP8 dispatch, BF16 combine), and the weighted sum reads
  // them as bf16, widened exactly. Every slot's output is rounded, the rows
  // that stay on this rank too, so y does not depend on which rank computed
  // what.
  const bool packed_back = PacksOutputs(dispatch, row_type);
  RowLeg& c = t.combine;
  c.encode = packed_back;
  c.exchange = crosses;
  c.send = packed_back ? EpBuffer::kOutPacked : EpBuffer::kOut;
  c.recv = !crosses      ? c.send
           : packed_back ? EpBuffer::kBackPacked
                         : EpBuffer::kBack;
  c.rows = c.recv;
  c.wire_type = packed_back ? ElementType::kBF16 : row_type;
  c.wire_row_elems = hidden;
  t.rows_in_place = !crosses && !packed;
  t.output_type = c.wire_type;
  return t;
}

}  // namespace moe
