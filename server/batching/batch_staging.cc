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
  StageCaller(batch, n);
  return n;
}

void BatchStaging::StageCaller(const Batch& batch, int64_t n) {
  any_caller_ = std::any_of(batch.begin(), batch.end(), [](const auto& r) {
    return r->route_source != RouteSource::kGate || r->return_router_logits ||
           r->shared != SharedPart::kAdd;
  });
  if (!any_caller_) return;
  route_.clear();
  shared_.clear();
  caller_ = CallerOverrides();
  int64_t begin = 0;
  for (const auto& r : batch) {
    const int64_t rows = r->x.rows;
    route_.push_back(r->route_source);
    shared_.push_back(r->shared);
    caller_.keep_logits = caller_.keep_logits || r->return_router_logits;
    if (r->route_source == RouteSource::kLogits && rows > 0) {
      const int64_t E = r->router_logits.cols;
      if (logits_.size() < static_cast<size_t>(n * E)) logits_.resize(n * E);
      DecodeRows(r->router_logits, 0, rows, logits_.data() + begin * E);
    }
    if (r->route_source == RouteSource::kRouting && rows > 0) {
      const int64_t k = static_cast<int64_t>(r->routing_experts.size()) / rows;
      if (experts_.size() < static_cast<size_t>(n * k)) {
        experts_.resize(n * k);
        weights_.resize(n * k);
      }
      std::copy(r->routing_experts.begin(), r->routing_experts.end(),
                experts_.begin() + begin * k);
      std::copy(r->routing_weights.begin(), r->routing_weights.end(),
                weights_.begin() + begin * k);
    }
    begin += rows;
  }
  caller_.route = route_;
  caller_.shared = shared_;
  caller_.logits = logits_.data();
  caller_.expert = experts_.data();
  caller_.weight = weights_.data();
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
      if (r->return_router_logits) {
        // One column per router row (the zero experts' included).
        const int64_t E = out.routing.logit_cols;
        res.router_logits = absl::MakeConstSpan(out.routing.logits)
                                .subspan(begin * E, rows * E);
      }
      if (r->shared == SharedPart::kSeparate) {
        res.shared =
            absl::MakeConstSpan(out.shared).subspan(begin * H, rows * H);
      }
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
