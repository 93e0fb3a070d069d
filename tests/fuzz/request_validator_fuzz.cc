// libFuzzer target: Forward request validation. Each input is tried twice:
// as protobuf bytes, and as a request assembled from the raw bytes (layer,
// dtype, shape, data), which reaches the deep checks quickly.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "server/api/request_validator.h"

namespace {

const moe::ModelInfo& Model() {
  static const moe::ModelInfo* info = [] {
    auto* m = new moe::ModelInfo();
    m->moe_layers = {0, 2, 5};
    m->layer.hidden = 8;
    m->layer.inter = 4;
    m->layer.num_experts = 4;
    m->layer.top_k = 2;
    return m;
  }();
  return *info;
}

void Check(const moe::v1::ForwardRequest& req) {
  moe::ForwardLimits limits;
  limits.max_request_tokens = 64;
  auto v = moe::ValidateForward(req, Model(), limits);
  if (!v.ok()) return;
  // Accepted input must be exactly what was promised: [N <= 64, 8] rows
  // viewed in the request's own bytes, all of them finite once decoded.
  const moe::WireMatrix& x = v->x;
  if (x.cols != 8 || x.rows < 0 || x.rows > 64 ||
      x.data != req.hidden_states().data().data() ||
      req.hidden_states().data().size() !=
          static_cast<size_t>(x.rows * x.cols) * moe::DTypeSize(x.dtype)) {
    __builtin_trap();
  }
  std::vector<float> rows(static_cast<size_t>(x.rows * x.cols));
  moe::DecodeRows(x, 0, x.rows, rows.data());
  for (float f : rows) {
    if (!std::isfinite(f)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe::v1::ForwardRequest parsed;
  if (parsed.ParseFromArray(data, static_cast<int>(size))) Check(parsed);
  if (size < 6) return 0;
  moe::v1::ForwardRequest built;
  built.set_layer(static_cast<int8_t>(data[0]));
  auto* t = built.mutable_hidden_states();
  t->set_dtype(static_cast<moe::v1::DType>(data[1] % 6));
  const int rank = data[2] % 4;
  size_t at = 3;
  for (int i = 0; i < rank && at + 2 <= size; ++i, at += 2) {
    int16_t dim;
    std::memcpy(&dim, data + at, 2);
    t->add_shape(dim);
  }
  built.set_output_dtype(static_cast<moe::v1::DType>(data[size - 1] % 5));
  t->set_data(reinterpret_cast<const char*>(data + at), size - at);
  Check(built);
  return 0;
}
