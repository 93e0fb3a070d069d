#include "server/router.h"

#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/metrics_endpoint.h"
#include "core/port_file.h"
#include "core/service_process.h"
#include "core/shutdown_signal.h"
#include "core/status_macros.h"
#include "proto/credentials.h"
#include "server/group/worker_group_factory.h"
#include "server/listening_line.h"
#include "server/router_part_options.h"
#include "server/step/step_runner.h"

namespace moe {
namespace {

// The public API: TLS with --tls-cert/--tls-key. Workers: mutual TLS when
// --tls-ca is given (on --worker-listen).
absl::Status AddCredentials(const TlsFiles& tls, RouterServers::Services* s) {
  MOE_ASSIGN_OR_RETURN(s->public_credentials,
                       MakeServerCredentials({tls.cert, tls.key, ""}, false));
  MOE_ASSIGN_OR_RETURN(s->worker_credentials,
                       MakeServerCredentials(tls, !tls.ca.empty()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenAuth>> MakeAuth(const std::string& file) {
  if (file.empty()) return nullptr;
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokenFile(file));
  return std::make_unique<TokenAuth>(tokens);
}

}  // namespace

Router::Router(RouterOptions o)
    : o_(std::move(o)),
      servers_(std::make_unique<RouterServers>(ServersOptionsFor(o_))) {}

Router::~Router() {
  // The pool's state callback reaches servers_ and metrics_, which are
  // destroyed before it: stop it first (a no-op after Stop).
  if (pool_) pool_->Shutdown();
}

int Router::Start() {
  // The probe port first: `liveness` answers while a large checkpoint
  // loads, so a startup probe does not kill the router for loading.
  if (int rc = ExitCodeOf(servers_->StartHealth(), 1)) return rc;
  if (int rc = ExitCodeOf(Prefixed("loading the model: ", LoadModel()), 1)) {
    return rc;
  }
  if (int rc = ExitCodeOf(MakePool(), 2)) return rc;
  if (int rc = ExitCodeOf(StartMetrics(), 1)) return rc;
  if (int rc = ExitCodeOf(MakeBatcher(), 1)) return rc;
  RouterServers::Services services;
  if (int rc =
          ExitCodeOf(Prefixed("TLS: ", AddCredentials(o_.tls, &services)), 2)) {
    return rc;
  }
  if (int rc = ExitCodeOf(MakeService(), 2)) return rc;
  services.api = service_.get();
  services.workers = worker_service_.get();
  services.message_limit = MessageLimitFor(o_, model_->info());
  services.request_limit = RequestLimitFor(o_, model_->info());
  if (int rc = ExitCodeOf(servers_->Start(services), 1)) return rc;
  ReportReadiness();
  if (int rc = ExitCodeOf(WritePortFile(o_.port_file, port()), 1)) return rc;
  spdlog::info(
      "{}", ListeningLine(
                o_, {port(), servers_->worker_port(), servers_->health_port()},
                auth_ != nullptr));
  return 0;
}

absl::Status Router::LoadModel() {
  MOE_ASSIGN_OR_RETURN(model_, RouterModel::Load(ModelOptionsFor(o_)));
  return absl::OkStatus();
}

absl::Status Router::MakePool() {
  if (o_.num_workers == 0) return absl::OkStatus();
  if (!o_.worker_token_file.empty()) {
    auto tokens = ReadTokenFile(o_.worker_token_file);
    if (!tokens.ok()) return Prefixed("--worker-token-file: ", tokens.status());
    worker_auth_ = std::make_unique<WorkerAuth>(*tokens);
  }
  PlacementFlags pf;
  pf.redundant = o_.redundant_experts;
  pf.load_file = o_.expert_load;
  pf.placement_file = o_.expert_placement;
  MOE_ASSIGN_OR_RETURN(placement_,
                       MakeRouterPlacement(model_->info(), o_.num_workers, pf));
  if (placement_ != nullptr) {
    spdlog::info("expert placement ({} redundant slots): {}",
                 placement_->redundant, PlacementToJson(*placement_));
  }
  pool_ = MakeWorkerGroup(
      PoolOptionsFor(o_, model_->info().layer.num_experts, placement_));
  worker_service_ = std::make_unique<WorkerControlService>(
      pool_->membership(),
      ControlOptionsFor(o_, model_->dtype(), worker_auth_.get()));
  return absl::OkStatus();
}

absl::Status Router::StartMetrics() {
  MOE_ASSIGN_OR_RETURN(
      exposer_, StartMetricsEndpoint(o_.metrics_listen, o_.metrics_port_file,
                                     registry_, "router"));
  return absl::OkStatus();
}

absl::Status Router::MakeBatcher() {
  const int64_t E = model_->info().layer.num_experts;
  stats_ = std::make_unique<ExpertStatsBook>(E);
  if (placement_ != nullptr) {
    stats_->SetPlacement(placement_);
    metrics_.Placement(*placement_, E);
  }
  std::vector<std::unique_ptr<StepRunner>> runners;
  for (int i = 0; i < o_.max_inflight_steps; ++i) {
    MOE_ASSIGN_OR_RETURN(
        auto runner, CreateStepRunner(*model_, pool_ ? pool_->steps() : nullptr,
                                      {o_.dispatch, o_.direct_step_tokens}));
    runners.push_back(std::move(runner));
  }
  if (pool_ != nullptr) {
    Rebalancer::Options ro;
    ro.placements = pool_->placements();
    ro.stats = stats_.get();
    ro.metrics = &metrics_;
    ro.info = model_->info();
    ro.world = o_.num_workers;
    ro.redundant =
        placement_ != nullptr ? placement_->redundant : o_.redundant_experts;
    ro.every_steps = o_.rebalance_every_steps;
    rebalancer_ = std::make_unique<Rebalancer>(ro);
  }
  Batcher::Options bo = BatcherOptionsFor(o_);
  bo.readiness = pool_ ? pool_->readiness() : nullptr;
  batcher_ = std::make_unique<Batcher>(bo, std::move(runners), stats_.get(),
                                       &metrics_);
  return absl::OkStatus();
}

absl::Status Router::MakeService() {
  auto auth = MakeAuth(o_.auth_token_file);
  if (!auth.ok()) return Prefixed("--auth-token-file: ", auth.status());
  auth_ = std::move(*auth);
  MoeServiceOptions so;
  so.model = model_.get();
  so.batcher = batcher_.get();
  so.readiness = pool_ ? pool_->readiness() : nullptr;
  so.stats = stats_.get();
  so.rebalancer = rebalancer_.get();
  so.metrics = &metrics_;
  so.limits.max_request_tokens = o_.max_request_tokens;
  so.max_batch_tokens = o_.max_batch_tokens;
  so.stream_max_inflight = o_.max_stream_inflight;
  so.stream_max_queued_tokens = o_.stream_max_queued_tokens;
  so.device = model_->device();
  so.auth = auth_.get();
  service_ = std::make_unique<MoeServiceImpl>(so);
  return absl::OkStatus();
}

void Router::ReportReadiness() {
  servers_->MarkLive(pool_ == nullptr, pool_ == nullptr);
  if (!pool_) return;
  pool_->SetStateCallback([this](const GroupState& st) {
    servers_->SetReady(st.ready, !st.degraded());
    metrics_.Workers(st.world_size, st.connected, st.ready_workers,
                     st.generation);
    metrics_.Group(st.group_size);
  });
  metrics_.Workers(o_.num_workers, 0, 0, 0);
}

void Router::Serve() {
  std::mutex mu;
  std::condition_variable cv;
  int signal = 0;
  // The handler's thread outlives Serve only after it has run.
  OnShutdownSignal([&](int sig) {
    std::lock_guard<std::mutex> lock(mu);
    signal = sig;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return signal != 0; });
  }
  Stop(absl::StrCat("signal ", signal));
}

void Router::Stop(const std::string& why) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  spdlog::info("{}: draining, {} requests in flight (at most {} ms)", why,
               metrics_.inflight(), o_.drain_wait.count());
  const double left = servers_->Drain(
      o_.drain_wait, [this] { return metrics_.inflight(); },
      [this] {
        if (pool_) pool_->Shutdown();
      });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      Clock::now() - start)
                      .count();
  if (left > 0) {
    spdlog::warn("drain timed out after {} ms with {} requests in flight", ms,
                 left);
  } else {
    spdlog::info("drained in {} ms", ms);
  }
  batcher_->Shutdown();
  spdlog::info("router stopped");
}

}  // namespace moe
