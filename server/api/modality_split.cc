#include "server/api/modality_split.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace moe {
namespace {

// The joined answer of a split request: each part's rows copied to their
// places as the part answers (its views live only while its `done` runs),
// and the request's `done` called once the last part has answered.
class ModalityJoin {
 public:
  ModalityJoin(int64_t rows, int64_t hidden, int64_t experts,
               std::function<void(const absl::Status&, BatchResult&)> done)
      : rows_(rows),
        hidden_(hidden),
        experts_(experts),
        done_(std::move(done)) {}

  // The part of `modality` (0 text, 1 vision) holds `rows` of the request.
  void Expect(int modality, std::vector<int64_t> rows) {
    absl::MutexLock lock(&mu_);
    rows_of_[modality] = std::move(rows);
    ++pending_;
  }

  void Answered(int modality, const absl::Status& s, const BatchResult& r) {
    BatchResult out;
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!s.ok()) {
        if (status_.ok()) status_ = s;
      } else {
        Copy(modality, r);
      }
      if (--pending_ > 0) return;
      // The last part: the joined buffers are final, and only `out` reads
      // them from here on.
      status = status_;
      if (status.ok()) Join(&out);
    }
    done_(status, out);
  }

 private:
  void Copy(int modality, const BatchResult& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::vector<int64_t>& rows = rows_of_[modality];
    Scatter(r.y, rows, hidden_, &y_);
    if (!r.shared.empty()) Scatter(r.shared, rows, hidden_, &shared_);
    if (!r.router_logits.empty()) {
      Scatter(r.router_logits, rows, experts_, &logits_);
    }
    // The parts' slots per token may differ (each expert set's own top_k):
    // the answer has the larger, the other part's extra slots empty (-1).
    Routing& part = parts_[modality];
    part.slots = r.routing.slots;
    part.expert = r.routing.expert;
    part.weight = r.routing.weight;
    if (static_cast<int64_t>(rows.size()) >= largest_) {
      largest_ = static_cast<int64_t>(rows.size());
      times_ = r.times;
      queue_us_ = r.queue_us;
      batch_tokens_ = r.batch_tokens;
      batch_requests_ = r.batch_requests;
    }
  }

  // Row i of `src` ([rows.size(), width]) to row rows[i] of `dst`
  // ([rows_, width], sized here).
  void Scatter(absl::Span<const float> src, const std::vector<int64_t>& rows,
               int64_t width, std::vector<float>* dst) const {
    dst->resize(rows_ * width);
    const size_t n = std::min(rows.size(), src.size() / width);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(dst->data() + rows[i] * width, src.data() + i * width,
                  width * sizeof(float));
    }
  }

  void Join(BatchResult* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t slots = 0;
    for (const Routing& p : parts_) slots = std::max(slots, p.slots);
    Routing& g = out->routing;
    g.tokens = rows_;
    g.slots = slots;
    g.expert.assign(rows_ * slots, -1);
    g.weight.assign(rows_ * slots, 0.0f);
    for (int m = 0; m < 2; ++m) {
      const Routing& p = parts_[m];
      const std::vector<int64_t>& rows = rows_of_[m];
      // A vision expert e is reported as experts_ + e.
      const int32_t offset = m == 1 ? static_cast<int32_t>(experts_) : 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        for (int64_t j = 0; j < p.slots; ++j) {
          const size_t from = i * p.slots + j;
          if (from >= p.expert.size()) break;
          const int32_t e = p.expert[from];
          g.expert[rows[i] * slots + j] = e < 0 ? e : e + offset;
          g.weight[rows[i] * slots + j] = p.weight[from];
        }
      }
    }
    y_.resize(rows_ * hidden_);
    out->y = y_;
    out->shared = shared_;
    out->router_logits = logits_;
    out->times = times_;
    out->queue_us = queue_us_;
    out->batch_tokens = batch_tokens_;
    out->batch_requests = batch_requests_;
  }

  const int64_t rows_, hidden_, experts_;
  const std::function<void(const absl::Status&, BatchResult&)> done_;
  // Set by Expect before any part is submitted, read-only after.
  std::vector<int64_t> rows_of_[2];
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<float> y_ ABSL_GUARDED_BY(mu_);
  std::vector<float> shared_ ABSL_GUARDED_BY(mu_);
  std::vector<float> logits_ ABSL_GUARDED_BY(mu_);
  Routing parts_[2] ABSL_GUARDED_BY(mu_);
  int64_t largest_ ABSL_GUARDED_BY(mu_) = -1;
  StageTimes times_ ABSL_GUARDED_BY(mu_);
  double queue_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batch_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int batch_requests_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::Status SubmitByModality(
    std::unique_ptr<BatchRequest> request,
    absl::Span<const int32_t> token_types, int64_t vision_layer,
    int64_t experts,
    const std::function<absl::Status(std::unique_ptr<BatchRequest>)>& submit) {
  const WireMatrix& x = request->x;
  std::vector<int64_t> rows_of[2];
  for (int64_t r = 0; r < x.rows; ++r) {
    rows_of[token_types[r] == 0 ? 0 : 1].push_back(r);
  }
  auto join = std::make_shared<ModalityJoin>(x.rows, x.cols, experts,
                                             std::move(request->done));
  // Each part's rows, gathered once: the part's x views them until it has
  // answered (its `done` keeps them).
  const size_t row_bytes = static_cast<size_t>(x.cols) * DTypeSize(x.dtype);
  std::vector<std::pair<int, std::unique_ptr<BatchRequest>>> parts;
  for (int m = 0; m < 2; ++m) {
    if (rows_of[m].empty()) continue;
    auto bytes =
        std::make_shared<std::vector<char>>(rows_of[m].size() * row_bytes);
    for (size_t i = 0; i < rows_of[m].size(); ++i) {
      std::memcpy(bytes->data() + i * row_bytes,
                  x.data + static_cast<size_t>(rows_of[m][i]) * row_bytes,
                  row_bytes);
    }
    auto part = std::make_unique<BatchRequest>();
    part->layer = m == 0 ? request->layer : vision_layer;
    part->x = {.rows = static_cast<int64_t>(rows_of[m].size()),
               .cols = x.cols,
               .dtype = x.dtype,
               .data = bytes->data()};
    part->output_dtype = request->output_dtype;
    part->return_router_logits = request->return_router_logits;
    part->shared = request->shared;
    part->arrival = request->arrival;
    part->deadline = request->deadline;
    part->done = [join, m, bytes](const absl::Status& s, BatchResult& r) {
      join->Answered(m, s, r);
    };
    join->Expect(m, std::move(rows_of[m]));
    parts.emplace_back(m, std::move(part));
  }
  if (parts.empty()) {
    return absl::InternalError("SubmitByModality: a request without rows");
  }
  for (auto& [m, part] : parts) {
    if (absl::Status s = submit(std::move(part)); !s.ok()) {
      // A part the batcher refused answers with its error, so the join
      // still finishes once the parts already queued have answered.
      BatchResult none;
      join->Answered(m, s, none);
    }
  }
  return absl::OkStatus();
}

}  // namespace moe
