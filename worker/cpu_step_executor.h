// The CPU step executor: packed fp32/bf16 experts, Gloo all-to-all over TCP,
// rows moved by pointer wherever no copy is needed.
#pragma once

#include <map>
#include <vector>

#include "engine/expert_runner.h"
#include "worker/step_executor.h"
#include "worker/step_plan.h"

namespace moe {

class CpuStepExecutor : public StepExecutor {
 public:
  explicit CpuStepExecutor(int threads) : threads_(threads) {}
  std::string device() const override { return "cpu"; }
  absl::Status Load(const ModelSource& source, int64_t begin, int64_t end,
                    WeightDType dtype, int64_t max_batch_tokens) override;
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      int rank, int world, const std::string& host,
      gloo::rendezvous::Store& store,
      std::chrono::milliseconds timeout) override;
  absl::Status Run(const moe::v1::Step& step, Communicator& comm,
                   moe::v1::StepResult* result) override;

 private:
  int threads_;
  MoeLayerConfig config_;
  int64_t max_batch_tokens_ = 0;
  std::map<int64_t, std::unique_ptr<LayerWeights>> layers_;
  ExpertRunner runner_;
  StepPlan plan_;
  std::vector<float> x_, send_, recv_, out_, back_, y_, scale_;
  std::vector<int64_t> src_row_, send_counts_, recv_counts_;
  std::vector<const float*> in_rows_;
  std::vector<float*> out_rows_;
};

}  // namespace moe
