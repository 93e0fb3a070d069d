#include "server/group/worker_group_factory.h"

#include <utility>

#include "server/group/worker_pool.h"

namespace moe {
namespace {

// Owns the pool and hands out its seams.
class PooledWorkerGroup final : public WorkerGroupSeams {
 public:
  explicit PooledWorkerGroup(WorkerPoolOptions options)
      : pool_(std::move(options)) {}

  StepGroup* steps() override { return &pool_; }
  GroupReadiness* readiness() override { return &pool_; }
  PlacementTarget* placements() override { return &pool_; }
  WorkerGroup* membership() override { return &pool_.group(); }
  void SetStateCallback(StateNotifier::Callback callback) override {
    pool_.SetStateCallback(std::move(callback));
  }
  void Shutdown() override { pool_.Shutdown(); }

 private:
  WorkerPool pool_;
};

}  // namespace

std::unique_ptr<WorkerGroupSeams> MakeWorkerGroup(WorkerPoolOptions options) {
  return std::make_unique<PooledWorkerGroup>(std::move(options));
}

}  // namespace moe
