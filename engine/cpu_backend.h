// The CPU backend: packed fp32/bf16 experts (engine/layer_weights.h), the
// packed-GEMM grouped SwiGLU, rows moved by pointer wherever no copy is
// needed, OpenMP threads. Its buffers are host memory and grow to the
// largest step seen, then stay: a steady step allocates nothing, and a
// router whose experts run on workers never touches them.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "engine/cpu_row_codec.h"
#include "engine/expert_backend.h"
#include "engine/expert_frame.h"
#include "engine/expert_runner.h"
#include "engine/host_queue.h"

namespace moe {

class CpuBackend : public ExpertBackend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}

  std::string name() const override { return "cpu"; }
  bool device_memory() const override { return false; }
  ElementType row_type() const override { return ElementType::kF32; }

  absl::Status Load(const ModelSource& source, const LoadOptions& options,
                    int64_t max_tokens) override;
  absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const override;
  const MoeLayerConfig& config() const override { return config_; }
  int64_t max_tokens() const override { return max_tokens_; }
  absl::StatusOr<LayerShard> Shard(int64_t layer) const override;

  absl::Status Route(int64_t layer, const float* x, int64_t n,
                     absl::Span<const int64_t> segment_ends,
                     Routing* routing) override;
  absl::Status RouteTokens(int64_t layer, const float* x, const RouteRows& rows,
                           Routing* routing) override;
  absl::Status Shared(int64_t layer, const float* x, int64_t n,
                      float* out) override;
  absl::StatusOr<const float*> EnterExperts(int64_t layer, const float* x,
                                            int64_t n) override;
  absl::Status LeaveExperts(int64_t layer, float* s, int64_t n,
                            float* y) override;

  absl::Status Prepare(const EpPlan& plan) override;
  absl::Status Gather(const EpStepInput& in, const EpPlan& plan,
                      bool x_resident, const RowTransport& transport) override;
  absl::Status RunExperts(int64_t layer, const EpPlan& plan, const void* in,
                          void* out) override;
  absl::Status Combine(const EpStepInput& in, const EpPlan& plan,
                       const void* back, float* y) override;
  RowCodec* row_codec() override { return &codec_; }
  StepQueue& queue() override { return queue_; }

  const float* OutputBias(int64_t layer) const override;

  // Returns the loaded weights of `layer`, or null.
  const LayerWeights* layer(int64_t layer) const;

 private:
  using Layers = std::map<int64_t, std::unique_ptr<LayerWeights>>;
  absl::StatusOr<const LayerWeights*> Find(int64_t layer) const;

  int threads_;
  MoeLayerConfig config_;
  int64_t max_tokens_ = 0;
  std::shared_ptr<const Layers> layers_ = std::make_shared<Layers>();
  TokenRouter router_;
  ExpertRunner runner_;
  ExpertFrame frame_;
  // Unscaled rows are packed straight from x (Gather leaves kSend unwritten
  // for a packed dispatch): an fp32 copy in between would be written and
  // read once more.
  CpuRowCodec codec_;
  HostQueue queue_;
  // Hold the step's buffers, fp32 rows of the experts' width (H, or the latent
  // width).
  std::vector<float> send_, recv_, out_, back_;
  // Hold the rows as they cross the dispatch when it is packed (bf16, FP8).
  std::vector<uint8_t> send_packed_, recv_packed_;
  std::vector<uint16_t> out_packed_, back_packed_;  // bf16 expert outputs
  std::vector<float> scale_;
  std::vector<const float*> in_rows_;
  std::vector<float*> out_rows_;
  // Set by Gather when the rows to send are x's own rows, read in place:
  // row j of kSend is x + src_row[j] * H.
  const float* in_place_x_ = nullptr;
};

}  // namespace moe
