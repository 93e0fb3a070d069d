// One worker's part of an expert-parallel MoE step (DESIGN.md section 2):
// permute own rows by destination expert, all-to-all dispatch with the
// plan's sizes, grouped SwiGLU over the local experts, all-to-all combine,
// weighted sum in slot order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/model_source.h"
#include "engine/expert_runner.h"
#include "engine/layer_weights.h"
#include "moe/v1/worker.pb.h"
#include "worker/comm/communicator.h"

namespace moe {

class StepExecutor {
 public:
  explicit StepExecutor(int num_threads) : threads_(num_threads) {}

  // Loads experts [begin, end) of every MoE layer of `source`, replacing
  // what was loaded before.
  absl::Status Load(const ModelSource& source, int64_t begin, int64_t end,
                    WeightDType dtype, int64_t max_batch_tokens);
  bool loaded() const { return !layers_.empty(); }

  // Runs `step` as rank comm.rank() of comm.size(); fills `result` (rows
  // and timing). Validates the step against this worker's rows first, so a
  // malformed plan is an error, never an overrun.
  absl::Status Run(const moe::v1::Step& step, Communicator& comm,
                   moe::v1::StepResult* result);

 private:
  absl::Status CheckPlan(const moe::v1::Step& step, int world,
                         int64_t rows) const;

  int threads_;
  MoeLayerConfig config_;
  int64_t max_batch_tokens_ = 0;
  std::map<int64_t, std::unique_ptr<LayerWeights>> layers_;
  ExpertRunner runner_;

  std::vector<float> x_, send_, recv_, out_, back_, y_, scale_;
  std::vector<int64_t> offsets_, order_, slot_row_, src_row_;
  std::vector<int64_t> send_counts_, recv_counts_, group_offsets_, cursor_;
  std::vector<const float*> in_rows_;
  std::vector<float*> out_rows_;
};

// First expert owned by `rank` of `world` ranks: rank * E / world.
inline int64_t ExpertBegin(int64_t rank, int64_t world, int64_t experts) {
  return rank * experts / world;
}

}  // namespace moe
