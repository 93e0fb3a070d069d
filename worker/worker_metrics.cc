#include "worker/worker_metrics.h"

#include <utility>

#include "absl/status/status.h"

namespace moe {
namespace {

prometheus::Histogram::BucketBoundaries Seconds() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

prometheus::Histogram::BucketBoundaries Rows() {
  prometheus::Histogram::BucketBoundaries b = {0};
  for (double v = 1; v <= 1 << 20; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : steps_(prometheus::BuildCounter()
                 .Name("moe_worker_steps_total")
                 .Help("Steps run by this worker, by gRPC status code")
                 .Register(r)),
      stages_(prometheus::BuildHistogram()
                  .Name("moe_worker_stage_duration_seconds")
                  .Help("A step's stages on this worker: decode (rows out "
                        "of the message), gather (rows packed by destination), "
                        "dispatch_wait (in the all-to-all to the experts), "
                        "experts (grouped SwiGLU), combine_wait (in the "
                        "all-to-all back), sum (weighted sum of the slots), "
                        "step (received to result encoded)")
                  .Register(r)),
      rows_(prometheus::BuildHistogram()
                .Name("moe_worker_expert_rows")
                .Help("Rows this worker's experts computed per step")
                .Register(r)
                .Add({}, Rows())),
      rank_(prometheus::BuildGauge()
                .Name("moe_worker_rank")
                .Help("Rank in the group")
                .Register(r)
                .Add({})),
      world_(prometheus::BuildGauge()
                 .Name("moe_worker_world_size")
                 .Help("Ranks in the group")
                 .Register(r)
                 .Add({})),
      generation_(prometheus::BuildGauge()
                      .Name("moe_worker_group_generation")
                      .Help("Generation of the group this worker is in")
                      .Register(r)
                      .Add({})),
      ready_(prometheus::BuildGauge()
                 .Name("moe_worker_ready")
                 .Help("1 when in a ready collective group")
                 .Register(r)
                 .Add({})) {
  // Present at zero from the start (rates and alerts see 0, not nothing).
  for (absl::StatusCode code :
       {absl::StatusCode::kOk, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kInternal}) {
    steps_.Add({{"code", absl::StatusCodeToString(code)}});
  }
}

void WorkerMetrics::Step(absl::StatusCode code, const WorkerStageTimes& t,
                         int64_t expert_rows) {
  steps_.Add({{"code", absl::StatusCodeToString(code)}}).Increment();
  if (code != absl::StatusCode::kOk) return;
  for (auto [stage, us] : {std::pair{"decode", t.decode_us},
                           {"gather", t.gather_us},
                           {"dispatch_wait", t.dispatch_wait_us},
                           {"experts", t.experts_us},
                           {"combine_wait", t.combine_wait_us},
                           {"sum", t.sum_us},
                           {"step", t.step_us}}) {
    stages_.Add({{"stage", stage}}, Seconds()).Observe(us / 1e6);
  }
  rows_.Observe(static_cast<double>(expert_rows));
}

void WorkerMetrics::Group(int rank, int world_size, uint64_t generation,
                          bool ready) {
  rank_.Set(rank);
  world_.Set(world_size);
  generation_.Set(static_cast<double>(generation));
  ready_.Set(ready ? 1 : 0);
}

}  // namespace moe
