#include "server/batching/batch_staging.h"

#include <algorithm>

#include "core/wire_matrix.h"

namespace moe {

int64_t BatchStaging::Stage(const Batch& batch) {
  const int64_t H = batch.front()->x.cols;
  int64_t n = 0;
  ends_.clear();
  for (const auto& r : batch) {
    n += r->x.rows;
    ends_.push_back(n);
  }
  if (rows_.size() < static_cast<size_t>(n * H)) rows_.resize(n * H);
  int64_t at = 0;
  for (const auto& r : batch) {
    DecodeRows(r->x, 0, r->x.rows, rows_.data() + at * H);
    at += r->x.rows;
  }
  token_ids_.clear();
  const bool any_ids =
      std::any_of(batch.begin(), batch.end(),
                  [](const auto& r) { return !r->token_ids.empty(); });
  if (any_ids) {
    for (const auto& r : batch) {
      if (r->token_ids.empty()) {
        token_ids_.insert(token_ids_.end(), r->x.rows, 0);
      } else {
        token_ids_.insert(token_ids_.end(), r->token_ids.begin(),
                          r->token_ids.end());
      }
    }
  }
  return n;
}

bool AllWantBf16(const Batch& batch) {
  return std::all_of(batch.begin(), batch.end(), [](const auto& r) {
    return r->x.dtype == DType::kBF16 && r->output_dtype == DType::kBF16;
  });
}

void AnswerBatch(Batch& batch, const absl::Status& status,
                 const StepRunner::Output& out, int64_t n,
                 std::chrono::steady_clock::time_point start) {
  const int64_t H = batch.front()->x.cols;
  int64_t begin = 0;
  for (auto& r : batch) {
    const int64_t rows = r->x.rows;
    BatchResult res;
    if (status.ok()) {
      res.y = absl::MakeConstSpan(out.y).subspan(begin * H, rows * H);
      const int64_t S = out.routing.slots;
      res.routing.tokens = rows;
      res.routing.slots = S;
      res.routing.expert.assign(
          out.routing.expert.begin() + begin * S,
          out.routing.expert.begin() + (begin + rows) * S);
      res.routing.weight.assign(
          out.routing.weight.begin() + begin * S,
          out.routing.weight.begin() + (begin + rows) * S);
      res.times = out.times;
      res.queue_us =
          std::chrono::duration<double, std::micro>(start - r->arrival).count();
      res.batch_tokens = n;
      res.batch_requests = static_cast<int>(batch.size());
    }
    r->done(status, res);
    begin += rows;
  }
}

}  // namespace moe
