// The worker's background placement load: the update's slots staged in the
// executor (the next step naming the epoch switches to them), answered with
// PlacementLoaded for the update's generation, epoch and this rank, or with
// the reason it could not load.
#include "worker/placement_loader.h"

#include <memory>
#include <vector>

#include "comm/loopback_communicator.h"
#include "gtest/gtest.h"
#include "tests/worker/small_model.h"

namespace moe {
namespace {

constexpr int64_t kMaxTokens = 8;

class PlacementLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::SmallModel();
    auto source = MakeSyntheticModel(testing::SmallModelLocation().synthetic);
    ASSERT_TRUE(source.ok()) << source.status();
    layer_ = (*source)->info().moe_layers.at(0);
    auto executor = StepExecutor::Create("cpu", 1, Collective::kGloo);
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = std::move(*executor);
    ExpertShard all{.begin = 0, .end = testing::kSmallModelExperts};
    ASSERT_TRUE(executor_
                    ->Load(**source, all, WeightDType::kF32, kMaxTokens,
                           /*placement_epoch=*/0)
                    .ok());
  }

  // The update of generation 7 to placement `epoch`: every expert and one
  // redundant copy of expert 0 on this worker's only layer.
  moe::v1::PlacementUpdate Update(uint64_t epoch) const {
    moe::v1::PlacementUpdate u;
    u.set_generation(7);
    u.set_epoch(epoch);
    u.set_redundant_experts(1);
    auto* slots = u.add_layer_slots();
    slots->set_layer(layer_);
    for (int32_t e : {0, 1, 2, 3, 0}) slots->add_experts(e);
    return u;
  }

  // Loads `update` of `model` and waits for the answer.
  moe::v1::PlacementLoaded Load(const moe::v1::PlacementUpdate& update,
                                const moe::v1::ModelSpec& model) {
    std::vector<moe::v1::WorkerMessage> replies;
    loader_.Start(
        update, model, /*rank=*/3, *executor_,
        [&replies](const moe::v1::WorkerMessage& m) { replies.push_back(m); });
    loader_.Join();
    EXPECT_EQ(replies.size(), 1u);
    return replies.empty() ? moe::v1::PlacementLoaded()
                           : replies.front().placement_loaded();
  }

  // What a step of placement `epoch` meets before its rows: a decoder that
  // refuses, so that only the placement check can fail otherwise.
  absl::Status StepOfEpoch(uint64_t epoch) {
    StepHeader header{.step_id = 1, .layer = layer_, .placement_epoch = epoch};
    StepOutput out;
    auto refuse = [](int64_t, std::vector<float>*, EpStepInput*) {
      return absl::CancelledError("rows not read");
    };
    return executor_->Run(header, refuse, *comm_, &out);
  }

  moe::v1::ModelSpec model_;
  int64_t layer_ = 0;
  std::unique_ptr<StepExecutor> executor_;
  std::unique_ptr<Communicator> comm_ = CreateLoopbackCommunicator();
  PlacementLoader loader_;
};

TEST_F(PlacementLoaderTest, StagesTheSlotsAndAnswersLoaded) {
  EXPECT_EQ(StepOfEpoch(1).code(), absl::StatusCode::kFailedPrecondition);
  const moe::v1::PlacementLoaded done = Load(Update(1), model_);
  EXPECT_EQ(done.generation(), 7u);
  EXPECT_EQ(done.epoch(), 1u);
  EXPECT_EQ(done.rank(), 3);
  EXPECT_EQ(done.error(), "");
  // The staged weights are taken by the first step that names epoch 1.
  EXPECT_EQ(StepOfEpoch(1).code(), absl::StatusCode::kCancelled);
}

TEST_F(PlacementLoaderTest, AnswersWhyItCouldNotLoad) {
  moe::v1::PlacementUpdate missing_layer = Update(2);
  missing_layer.clear_layer_slots();
  const moe::v1::PlacementLoaded done = Load(missing_layer, model_);
  EXPECT_EQ(done.epoch(), 2u);
  EXPECT_NE(done.error().find("needs layer_slots"), std::string::npos)
      << done.error();
  EXPECT_NE(Load(Update(2), moe::v1::ModelSpec()).error(), "");
  EXPECT_EQ(StepOfEpoch(2).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moe
