#include "worker/placement_loader.h"

#include <chrono>
#include <memory>
#include <string>

#include "core/logging.h"
#include "core/status_macros.h"
#include "proto/model_spec.h"
#include "worker/assignment.h"

namespace moe {

void PlacementLoader::Start(const moe::v1::PlacementUpdate& update,
                            const moe::v1::ModelSpec& model, int32_t rank,
                            StepExecutor& executor, Reply reply) {
  Join();
  thread_ = std::thread([update, model, rank, &executor,
                         reply = std::move(reply)] {
    const ExpertShard shard = ShardOf(update);
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = [&]() -> absl::Status {
      MOE_ASSIGN_OR_RETURN(ModelLocation loc, ModelLocationOf(model));
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> source, OpenModel(loc));
      MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                           ParseWeightDType(model.weight_dtype()));
      return executor.Stage(*source, shard, dtype, update.epoch());
    }();
    moe::v1::WorkerMessage out;
    auto* done = out.mutable_placement_loaded();
    done->set_generation(update.generation());
    done->set_epoch(update.epoch());
    done->set_rank(rank);
    if (!s.ok()) {
      spdlog::error("placement {}: {}", update.epoch(), s.ToString());
      done->set_error(std::string(s.message()));
    } else {
      spdlog::info("placement {} staged in {:.0f} ms: experts {}",
                   update.epoch(),
                   std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count(),
                   ShardText(shard));
    }
    reply(out);
  });
}

}  // namespace moe
