#include "worker/worker_agent.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/net_address.h"
#include "core/status_macros.h"
#include "core/thread_slice.h"
#include "proto/model_spec.h"
#include "proto/step_codec.h"
#include "worker/router_store.h"
#include "worker/step_message.h"

namespace moe {
namespace {

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// "[4, 8)", or "slots 0:[1,5,7] 1:[...]" with redundant experts.
std::string ShardText(const ExpertShard& shard) {
  if (shard.layer_slots.empty()) {
    return absl::StrCat("[", shard.begin, ", ", shard.end, ")");
  }
  std::string out = "slots";
  for (const auto& [layer, slots] : shard.layer_slots) {
    absl::StrAppend(&out, " ", layer, ":[", absl::StrJoin(slots, ","), "]");
  }
  return out;
}

}  // namespace

std::string RepeatedLine::Next(const std::string& line, Clock::time_point now) {
  if (line == last_ && now - last_logged_ < every_) {
    ++suppressed_;
    return "";
  }
  std::string out = line;
  if (suppressed_ > 0) {
    absl::StrAppend(
        &out,
        line == last_
            ? absl::StrCat(" (", suppressed_, " more like it in the last ",
                           std::chrono::duration_cast<std::chrono::seconds>(
                               now - last_logged_)
                               .count(),
                           " s not logged)")
            : absl::StrCat(" (the previous line came ", suppressed_,
                           " more times, not logged)"));
  }
  last_ = line;
  last_logged_ = now;
  suppressed_ = 0;
  return out;
}

void RepeatedLine::Reset() {
  last_.clear();
  suppressed_ = 0;
}

WorkerAgent::WorkerAgent(WorkerOptions options,
                         std::unique_ptr<StepExecutor> executor)
    : options_(std::move(options)), executor_(std::move(executor)) {}

void WorkerAgent::Shutdown() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(ctx_mu_);
  if (active_queue_ != nullptr) {
    active_queue_->Close();  // the executor finishes its step, then leaves
  } else if (active_ctx_ != nullptr) {
    active_ctx_->TryCancel();
  }
}

void WorkerAgent::Run() {
  while (!stopping_) {
    Session();
    if (!stopping_) std::this_thread::sleep_for(options_.reconnect_delay);
  }
}

absl::StatusOr<std::string> WorkerAgent::CollectiveHost() const {
  if (options_.collective_host != "auto") return options_.collective_host;
  return LocalAddressToward(options_.router);
}

void WorkerAgent::SetReady(bool ready) {
  if (options_.on_ready) options_.on_ready(ready);
}

void WorkerAgent::Assign(const moe::v1::Assignment& a, moe::v1::Ready* ready) {
  ready->set_generation(a.generation());
  ready->set_rank(a.rank());
  comm_.reset();  // any previous group is over
  SetReady(false);
  generation_ = a.generation();
  int64_t max_tokens = a.max_batch_tokens();
  if (options_.max_batch_tokens > 0 &&
      (max_tokens <= 0 || options_.max_batch_tokens < max_tokens)) {
    max_tokens = options_.max_batch_tokens;
  }
  ExpertShard shard;
  shard.begin = a.expert_begin();
  shard.end = a.expert_end();
  shard.redundant = a.redundant_experts();
  std::string slots_key;
  for (const moe::v1::LayerSlots& l : a.layer_slots()) {
    shard.layer_slots[l.layer()].assign(l.experts().begin(), l.experts().end());
    absl::StrAppend(&slots_key, l.layer(), ":", absl::StrJoin(l.experts(), ","),
                    ";");
  }
  const std::string key =
      absl::StrCat(a.model().SerializeAsString(), "|", a.expert_begin(), "-",
                   a.expert_end(), "|", a.redundant_experts(), "|", slots_key,
                   "|", max_tokens, "|", a.placement_epoch());
  if (options_.metrics != nullptr) {
    options_.metrics->Group(a.rank(), a.world_size(), a.generation(), false);
  }
  auto fail = [&](const absl::Status& s) {
    spdlog::error("generation {}: {}", a.generation(), s.ToString());
    ready->set_error(std::string(s.message()));
  };
  if (key != loaded_key_) {
    auto loc = ModelLocationOf(a.model());
    if (!loc.ok()) return fail(loc.status());
    auto model = OpenModel(*loc);
    if (!model.ok()) return fail(model.status());
    auto dtype = ParseWeightDType(a.model().weight_dtype());
    if (!dtype.ok()) return fail(dtype.status());
    spdlog::info(
        "loading experts {} of {} ({}, steps of at most {} "
        "rows)",
        ShardText(shard), (*model)->info().source, a.model().weight_dtype(),
        max_tokens);
    loaded_key_.clear();
    if (absl::Status s = executor_->Load(**model, shard, *dtype, max_tokens,
                                         a.placement_epoch());
        !s.ok()) {
      return fail(s);
    }
    loaded_key_ = key;
  }
  assigned_model_ = a.model();
  rank_ = a.rank();
  // Gloo connects in attempts of at most connect_timeout_ms, retried with
  // fresh keys until the collective timeout, while this generation is the
  // newest: a peer that was stopped for a moment costs one short attempt,
  // not the whole timeout. NCCL connects once.
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::milliseconds(a.collective_timeout_ms());
  auto attempt_timeout = timeout;
  if (a.connect_timeout_ms() > 0 &&
      executor_->collective() == Collective::kGloo) {
    attempt_timeout =
        std::min(timeout, std::chrono::milliseconds(a.connect_timeout_ms()));
  }
  const auto give_up = Clock::now() + timeout;
  RouterStore store(stub_, a.generation(), a.store_token(), attempt_timeout,
                    options_.auth_token);
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  for (int attempt = 1;; ++attempt) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - Clock::now());
    AttemptStore attempt_store(store, attempt);
    comm = executor_->Connect(
        a.rank(), a.world_size(), collective_host_, attempt_store,
        std::clamp(left, std::chrono::milliseconds(1), attempt_timeout));
    if (comm.ok() || attempt_timeout == timeout || !store.retryable() ||
        stopping_ || newest_generation_ > a.generation() ||
        Clock::now() + std::chrono::milliseconds(100) >= give_up) {
      break;
    }
    spdlog::warn("generation {}: connect attempt {} failed ({}); retrying",
                 a.generation(), attempt, comm.status().message());
  }
  if (!comm.ok()) return fail(comm.status());
  comm_ = std::move(*comm);
  SetReady(true);
  if (options_.metrics != nullptr) {
    options_.metrics->Group(a.rank(), a.world_size(), a.generation(), true);
  }
  spdlog::info("generation {}: rank {} of {}, experts {}, ready",
               a.generation(), a.rank(), a.world_size(), ShardText(shard));
}

void WorkerAgent::Execute(
    const moe::v1::RouterMessage& msg,
    grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>*
        stream) {
  if (const uint64_t g = GenerationOf(msg); g < newest_generation_) {
    // Its generation is over: the router already failed the step, and
    // expects no Ready. Skipping it lets the newest one start at once.
    spdlog::info("skipping {} of superseded generation {} (newest {})",
                 msg.has_step() ? "a step" : "an assignment", g,
                 newest_generation_.load());
    return;
  }
  moe::v1::WorkerMessage out;
  if (msg.has_placement()) {
    if (msg.placement().generation() == generation_) {
      StagePlacement(msg.placement(), stream);
    }
    return;
  }
  if (msg.has_assignment()) {
    Assign(msg.assignment(), out.mutable_ready());
  } else if (msg.has_step()) {
    const auto& step = msg.step();
    auto* result = out.mutable_result();
    // The last result's row buffer, overwritten in place by a step of the
    // same size (no allocation, no zero-fill).
    result->mutable_rows()->mutable_data()->swap(result_rows_);
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
      options_.metrics->Step(
          static_cast<absl::StatusCode>(result->error_code()),
          DecodeStepTimes(*result, result->rank()), result->expert_rows());
    }
  } else {
    return;
  }
  std::lock_guard<std::mutex> lock(write_mu_);
  if (!writes_closed_) stream->Write(out);
  if (out.has_result()) {
    out.mutable_result()->mutable_rows()->mutable_data()->swap(result_rows_);
  }
}

void WorkerAgent::StagePlacement(
    const moe::v1::PlacementUpdate& update,
    grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>*
        stream) {
  if (loader_.joinable()) loader_.join();
  loader_ = std::thread([this, update, model = assigned_model_, rank = rank_,
                         stream] {
    ExpertShard shard;
    shard.redundant = update.redundant_experts();
    for (const moe::v1::LayerSlots& l : update.layer_slots()) {
      shard.layer_slots[l.layer()].assign(l.experts().begin(),
                                          l.experts().end());
    }
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = [&]() -> absl::Status {
      MOE_ASSIGN_OR_RETURN(ModelLocation loc, ModelLocationOf(model));
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> source, OpenModel(loc));
      MOE_ASSIGN_OR_RETURN(WeightDType dtype,
                           ParseWeightDType(model.weight_dtype()));
      return executor_->Stage(*source, shard, dtype, update.epoch());
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
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!writes_closed_) stream->Write(out);
  });
}

uint64_t WorkerAgent::GenerationOf(const moe::v1::RouterMessage& msg) {
  if (msg.has_placement()) return msg.placement().generation();
  if (msg.has_assignment()) return msg.assignment().generation();
  if (msg.has_step()) return msg.step().generation();
  return 0;
}

void WorkerAgent::Heartbeats(
    grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>*
        stream) {
  std::unique_lock<std::mutex> lock(write_mu_);
  while (!writes_closed_) {
    heartbeat_cv_.wait_for(
        lock, std::chrono::milliseconds(heartbeat_interval_ms_.load()));
    if (writes_closed_) break;
    moe::v1::WorkerMessage beat;
    beat.mutable_heartbeat()->set_generation(newest_generation_);
    if (!stream->Write(beat)) break;
  }
}

void WorkerAgent::Session() {
  // Per session: the route to the router (and so the address) can change.
  auto host = CollectiveHost();
  if (!host.ok()) {
    const std::string line = retry_log_.Next(
        absl::StrCat("collective address toward router ", options_.router, ": ",
                     host.status().message(), "; retrying"),
        RepeatedLine::Clock::now());
    if (!line.empty()) spdlog::warn("{}", line);
    return;
  }
  if (*host != collective_host_) {
    spdlog::info("collective transport on {}{}", *host,
                 options_.collective_host == "auto"
                     ? " (the interface that reaches the router)"
                     : "");
  }
  collective_host_ = *host;
  grpc::ChannelArguments args;
  // A dead link (partition, vanished router host) ends the stream within
  // about KEEPALIVE_TIME + KEEPALIVE_TIMEOUT; the worker then re-registers.
  // The router permits these pings (see router_main.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  if (!options_.server_name.empty()) {
    args.SetSslTargetNameOverride(options_.server_name);
  }
  auto creds = options_.credentials ? options_.credentials
                                    : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateCustomChannel(options_.router, creds, args);
  stub_ = moe::v1::WorkerControl::NewStub(channel);

  grpc::ClientContext ctx;
  if (!options_.auth_token.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + options_.auth_token);
  }
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (stopping_) return;
    active_ctx_ = &ctx;
  }
  auto stream = stub_->Join(&ctx);
  bool writes_done = false;
  moe::v1::WorkerMessage hello;
  auto* reg = hello.mutable_register_();
  reg->set_device(options_.device);
  reg->set_threads(options_.threads);
  reg->set_host(HostName());
  reg->set_collective_host(collective_host_);
  reg->set_pid(getpid());
  reg->set_device_identity(options_.device_identity);
  reg->set_shares_device(options_.shares_device);
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    writes_closed_ = false;
  }
  newest_generation_ = 0;
  if (stream->Write(hello)) {
    // Heartbeats go out from a thread of their own, also while a step
    // runs, so that the router tells a stopped worker from a busy one.
    std::thread heartbeat([&] { Heartbeats(stream.get()); });
    // Steps run in order on one thread; reading goes on meanwhile so that
    // the router's writes never block on a busy worker.
    BlockingQueue<moe::v1::RouterMessage> queue;
    std::condition_variable reader_cv;
    bool reader_done = false;  // guarded by ctx_mu_
    std::thread executor([&] {
      while (auto msg = queue.Pop()) {
        if (stopping_) break;  // queued behind the last step: not started
        // Waiting for the next step, this thread wakes as a latency one
        // (core/thread_slice.h); running it, it computes.
        const ScopedThreadRole computing(ThreadRole::kCompute,
                                         ThreadRole::kLatency);
        Execute(*msg, stream.get());
      }
      if (!stopping_) return;
      // Shutdown: the last answer is written; closing our side ends the
      // router's Join, and with it this stream. A router that does not
      // answer within a few seconds is cut off.
      spdlog::info("leaving the worker group");
      {
        std::lock_guard<std::mutex> lock(write_mu_);
        writes_closed_ = true;
        heartbeat_cv_.notify_all();
        stream->WritesDone();
      }
      writes_done = true;
      std::unique_lock<std::mutex> lock(ctx_mu_);
      if (!reader_cv.wait_for(lock, std::chrono::seconds(5),
                              [&] { return reader_done; })) {
        ctx.TryCancel();
      }
    });
    {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      active_queue_ = &queue;
      if (stopping_) queue.Close();  // Shutdown came before the queue
    }
    moe::v1::RouterMessage msg;
    bool announced = false;
    while (stream->Read(&msg)) {
      if (!announced) {
        spdlog::info("connected to router {}", options_.router);
        announced = true;
        retry_log_.Reset();
      }
      if (msg.has_assignment() &&
          msg.assignment().heartbeat_interval_ms() > 0) {
        heartbeat_interval_ms_ = msg.assignment().heartbeat_interval_ms();
      }
      if (const uint64_t g = GenerationOf(msg); g > newest_generation_) {
        newest_generation_ = g;
      }
      queue.Push(std::move(msg));
      msg = moe::v1::RouterMessage();
    }
    {
      std::lock_guard<std::mutex> lock(ctx_mu_);
      reader_done = true;
      active_queue_ = nullptr;
    }
    reader_cv.notify_all();
    queue.Close();
    executor.join();
    if (loader_.joinable()) loader_.join();
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      writes_closed_ = true;
      heartbeat_cv_.notify_all();
    }
    heartbeat.join();
  }
  if (!writes_done) stream->WritesDone();
  const grpc::Status s = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    active_ctx_ = nullptr;
  }
  comm_.reset();
  SetReady(false);
  if (stopping_) return;
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    // Refused for what this worker is (e.g. a GPU another NCCL worker
    // uses): retrying soon would change nothing.
    const std::string line = retry_log_.Next(
        absl::StrCat("router ", options_.router, " refused this worker: ",
                     s.error_message(), "; retrying in 5 s"),
        RepeatedLine::Clock::now());
    if (!line.empty()) spdlog::error("{}", line);
    for (int i = 0; i < 50 && !stopping_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } else {
    // A standby worker (all ranks taken) lands here on every reconnect.
    const bool standby = s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    const std::string line = retry_log_.Next(
        standby
            ? absl::StrCat("router ", options_.router, " has no rank free (",
                           s.error_message(), "); standing by, retrying")
            : absl::StrCat("router ", options_.router, " unreachable or gone (",
                           s.error_message(), "); retrying"),
        RepeatedLine::Clock::now());
    if (line.empty()) return;
    if (standby) {
      spdlog::info("{}", line);
    } else {
      spdlog::warn("{}", line);
    }
  }
}

}  // namespace moe
