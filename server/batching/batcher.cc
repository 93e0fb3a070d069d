#include "server/batching/batcher.h"

#include "core/thread_slice.h"

namespace moe {

Batcher::Batcher(Options options,
                 std::vector<std::unique_ptr<StepRunner>> runners,
                 ExpertStatsBook* stats, RouterMetrics* metrics)
    : options_(options),
      runners_(std::move(runners)),
      stats_(stats),
      metrics_(metrics),
      queue_({.policy = {options.max_batch_tokens, options.window},
              .max_queue_tokens = options.max_queue_tokens,
              .parallel_steps = static_cast<int>(runners_.size())},
             metrics),
      staging_(runners_.size()),
      outputs_(runners_.size()) {
  for (size_t i = 0; i < runners_.size(); ++i) {
    threads_.emplace_back([this, i] { Loop(i); });
  }
}

Batcher::~Batcher() { Shutdown(); }

absl::Status Batcher::Submit(std::unique_ptr<BatchRequest> request) {
  if (options_.readiness != nullptr) {
    const GroupState st = options_.readiness->state();
    // With --hold-while-regrouping-ms the request queues like any other and
    // its step waits for the group (StepGroup::AwaitGroup).
    if (!st.ready && !options_.readiness->holds_steps()) {
      return absl::UnavailableError(NotReadyMessage(st));
    }
  }
  return queue_.Push(std::move(request));
}

void Batcher::Shutdown() {
  queue_.Close();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Batcher::Loop(size_t index) {
  while (std::optional<Batch> batch = queue_.Next()) {
    {
      const ScopedThreadRole computing(ThreadRole::kCompute,
                                       ThreadRole::kLatency);
      RunBatch(index, *batch);
    }
    queue_.StepDone();
  }
}

void Batcher::RunBatch(size_t index, Batch& batch) {
  const Clock::time_point start = Clock::now();
  const int64_t layer = batch.front()->layer;
  BatchStaging& staging = staging_[index];
  const int64_t n = staging.Stage(batch);
  StepRunner::Output& out = outputs_[index];
  // The step may stay bf16 through and through, because nothing finer than bf16
  // is wanted back.
  const bool bf16 = options_.bf16_steps && AllWantBf16(batch);
  const StepRequest request{.layer = layer,
                            .x = staging.rows(),
                            .n = n,
                            .segment_ends = staging.ends(),
                            .token_ids = staging.token_ids(),
                            .bf16_out = bf16,
                            .deadline = start + options_.step_timeout,
                            .caller = staging.caller()};
  const absl::Status s = runners_[index]->Run(request, &out);
  if (s.ok() && n > 0) {
    // The step's per-token cost feeds the admission estimate of how long a
    // queued request waits.
    queue_.RecordStepCost(
        std::chrono::duration<double>(Clock::now() - start).count() /
        static_cast<double>(n));
  }
  RecordStep(batch, s, out, layer, n, start);
  AnswerBatch(batch, s, out, n, start);
}

void Batcher::RecordStep(const Batch& batch, const absl::Status& s,
                         const StepRunner::Output& out, int64_t layer,
                         int64_t n, Clock::time_point start) {
  if (s.ok() && stats_ != nullptr) {
    stats_->Record(layer, out.routing.expert_counts, n, out.routing.dropped,
                   out.worker_rows);
  }
  if (metrics_ == nullptr) return;
  for (const auto& r : batch) {
    metrics_->Queued(
        std::chrono::duration<double, std::micro>(start - r->arrival).count() /
        1e6);
  }
  if (!s.ok()) return;
  metrics_->Step(n, static_cast<int>(batch.size()), out.times);
  if (stats_ != nullptr) {
    metrics_->Layer(layer, n, out.routing.dropped, stats_->Balance(layer));
    if (!out.worker_rows.empty()) {
      metrics_->WorkerRows(layer, out.worker_rows,
                           stats_->WorkerImbalance(layer));
    }
  }
}

}  // namespace moe
