#include "worker/worker_agent.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "proto/model_spec.h"
#include "proto/step_codec.h"
#include "worker/assignment.h"
#include "worker/router_store.h"
#include "worker/step_message.h"

namespace moe {

WorkerAgent::WorkerAgent(WorkerOptions options,
                         std::unique_ptr<StepExecutor> executor)
    : options_(std::move(options)),
      executor_(std::move(executor)),
      connection_(options_, this) {}

WorkerAgent::~WorkerAgent() { loader_.Join(); }

void WorkerAgent::SetReady(bool ready) {
  if (options_.on_ready) options_.on_ready(ready);
}

void WorkerAgent::SessionEnded() {
  loader_.Join();
  comm_.reset();
  SetReady(false);
}

void WorkerAgent::Handle(const moe::v1::RouterMessage& msg,
                         JoinStream& stream) {
  if (const uint64_t g = GenerationOf(msg); g < stream.newest_generation()) {
    // Its generation is over: the router already failed the step, and
    // expects no Ready. Skipping it lets the newest one start at once.
    spdlog::info("skipping {} of superseded generation {} (newest {})",
                 msg.has_step() ? "a step" : "an assignment", g,
                 stream.newest_generation());
    return;
  }
  if (msg.has_placement()) {
    if (msg.placement().generation() == generation_) {
      loader_.Start(
          msg.placement(), assigned_model_, rank_, *executor_,
          [&stream](const moe::v1::WorkerMessage& m) { stream.Write(m); });
    }
    return;
  }
  moe::v1::WorkerMessage out;
  if (msg.has_assignment()) {
    Assign(msg.assignment(), stream, out.mutable_ready());
    stream.Write(out);
  } else if (msg.has_step()) {
    auto* result = out.mutable_result();
    // The last result's row buffer, overwritten in place by a step of the
    // same size (no allocation, no zero-fill).
    result->mutable_rows()->mutable_data()->swap(result_rows_);
    RunStep(msg.step(), result);
    stream.Write(out);
    result->mutable_rows()->mutable_data()->swap(result_rows_);
  }
}

void WorkerAgent::RunStep(const moe::v1::Step& step,
                          moe::v1::StepResult* result) {
  result->set_generation(step.generation());
  result->set_step_id(step.step_id());
  absl::Status s;
  bool broken = true;  // no usable group for this step
  if (comm_ == nullptr || step.generation() != generation_) {
    s = absl::UnavailableError(absl::StrCat(
        "worker is not in generation ", step.generation(), " (has ",
        generation_, comm_ ? "" : ", no collective group", ")"));
  } else {
    result->set_rank(comm_->rank());
    s = RunStepMessage(*executor_, step, *comm_, result);
    broken = !s.ok() && !executor_->collectives_intact();
    // A failed collective leaves the group unusable until reassigned; a
    // step refused before its collectives leaves it as it was.
    if (broken) {
      comm_.reset();
      SetReady(false);
    }
  }
  if (!s.ok()) {
    spdlog::warn("step {}: {}{}", step.step_id(), s.ToString(),
                 broken ? " (collective group broken)" : "");
    result->clear_rows();
    result->set_error_code(static_cast<int>(s.code()));
    result->set_error_message(std::string(s.message()));
    result->set_collectives_broken(broken);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->Step(static_cast<absl::StatusCode>(result->error_code()),
                           DecodeStepTimes(*result, result->rank()),
                           result->expert_rows());
  }
}

void WorkerAgent::Assign(const moe::v1::Assignment& a, JoinStream& stream,
                         moe::v1::Ready* ready) {
  ready->set_generation(a.generation());
  ready->set_rank(a.rank());
  comm_.reset();  // any previous group is over
  SetReady(false);
  generation_ = a.generation();
  const int64_t max_tokens = MaxTokensFor(a, options_.max_batch_tokens);
  const ExpertShard shard = ShardOf(a);
  if (options_.metrics != nullptr) {
    options_.metrics->Group(a.rank(), a.world_size(), a.generation(), false);
  }
  auto fail = [&](const absl::Status& s) {
    spdlog::error("generation {}: {}", a.generation(), s.ToString());
    ready->set_error(std::string(s.message()));
  };
  if (absl::Status s = LoadExperts(a, shard, max_tokens); !s.ok()) {
    return fail(s);
  }
  assigned_model_ = a.model();
  rank_ = a.rank();
  auto comm = ConnectGroup(a, stream);
  if (!comm.ok()) return fail(comm.status());
  comm_ = *std::move(comm);
  SetReady(true);
  if (options_.metrics != nullptr) {
    options_.metrics->Group(a.rank(), a.world_size(), a.generation(), true);
  }
  spdlog::info("generation {}: rank {} of {}, experts {}, ready",
               a.generation(), a.rank(), a.world_size(), ShardText(shard));
}

absl::Status WorkerAgent::LoadExperts(const moe::v1::Assignment& a,
                                      const ExpertShard& shard,
                                      int64_t max_tokens) {
  const std::string key = LoadKeyOf(a, max_tokens);
  if (key == loaded_key_) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(ModelLocation loc, ModelLocationOf(a.model()));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> model, OpenModel(loc));
  MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                       ParseWeightDType(a.model().weight_dtype()));
  spdlog::info("loading experts {} of {} ({}, steps of at most {} rows)",
               ShardText(shard), model->info().source, a.model().weight_dtype(),
               max_tokens);
  loaded_key_.clear();
  MOE_RETURN_IF_ERROR(
      executor_->Load(*model, shard, dtype, max_tokens, a.placement_epoch()));
  loaded_key_ = key;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> WorkerAgent::ConnectGroup(
    const moe::v1::Assignment& a, JoinStream& stream) {
  // Gloo connects in attempts of at most connect_timeout_ms, retried with
  // fresh keys until the collective timeout, while this generation is the
  // newest: a peer that was stopped for a moment costs one short attempt,
  // not the whole timeout. NCCL connects once.
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  const auto timeout = milliseconds(a.collective_timeout_ms());
  auto attempt_timeout = timeout;
  if (a.connect_timeout_ms() > 0 &&
      executor_->collective() == Collective::kGloo) {
    attempt_timeout = std::min(timeout, milliseconds(a.connect_timeout_ms()));
  }
  const auto give_up = Clock::now() + timeout;
  RouterStore store(stream.stub(), a.generation(), a.store_token(),
                    attempt_timeout, options_.auth_token);
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  for (int attempt = 1;; ++attempt) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(give_up - Clock::now());
    AttemptStore attempt_store(store, attempt);
    comm = executor_->Connect(
        a.rank(), a.world_size(), stream.collective_host(), attempt_store,
        std::clamp(left, milliseconds(1), attempt_timeout));
    if (comm.ok() || attempt_timeout == timeout || !store.retryable() ||
        stream.stopping() || stream.newest_generation() > a.generation() ||
        Clock::now() + milliseconds(100) >= give_up) {
      return comm;
    }
    spdlog::warn("generation {}: connect attempt {} failed ({}); retrying",
                 a.generation(), attempt, comm.status().message());
  }
}

}  // namespace moe
