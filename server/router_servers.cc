#include "server/router_servers.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/logging.h"
#include "core/net_address.h"
#include "core/port_file.h"
#include "core/status_macros.h"
#include "proto/exclusive_ports.h"
#include "proto/keepalive.h"

namespace moe {

RouterServers::RouterServers(Options o) : o_(std::move(o)) {}

RouterServers::~RouterServers() = default;

absl::Status RouterServers::StartHealth() {
  if (o_.health_listen.empty()) return absl::OkStatus();
  // The probe port serves plaintext health only: for probes that speak neither
  // TLS nor tokens. NOT_SERVING (but alive) until MarkLive.
  MOE_ASSIGN_OR_RETURN(
      health_,
      HealthServer::Start(o_.health_listen,
                          "the router's --listen address " + o_.listen));
  for (const char* name : {"", "moe.v1.MoeService", "full-capacity"}) {
    health_->service().SetServingStatus(name, false);
  }
  health_port_ = health_->port();
  return WritePortFile(o_.health_port_file, health_port_);
}

void RouterServers::Configure(grpc::ServerBuilder& b, int receive_limit,
                              int send_limit) const {
  RefuseSharedPorts(b);
  b.SetMaxReceiveMessageSize(receive_limit);
  b.SetMaxSendMessageSize(send_limit);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                       o_.max_concurrent_streams);
  // Workers ping on idle streams to notice a dead link: allowed rather
  // than answered with GOAWAY, and the router pings too, so that a worker
  // whose link died leaves the group within a few seconds.
  AddKeepaliveServerArgs(b);
}

absl::Status RouterServers::Listen(
    const char* flag, const std::string& address,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const std::vector<grpc::Service*>& services, int receive_limit,
    int send_limit, int* port) {
  MOE_RETURN_IF_ERROR(CheckCanListen(flag, address));
  grpc::ServerBuilder b;
  Configure(b, receive_limit, send_limit);
  b.AddListeningPort(
      address, credentials ? credentials : grpc::InsecureServerCredentials(),
      port);
  for (grpc::Service* service : services) b.RegisterService(service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server || *port == 0) return ListenFailure(flag, address);
  servers_.push_back(std::move(server));
  return absl::OkStatus();
}

absl::Status RouterServers::Start(const Services& s) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const bool own_worker_port = s.workers && !o_.worker_listen.empty();
  std::vector<grpc::Service*> pub = {s.api};
  if (s.workers && !own_worker_port) pub.push_back(s.workers);
  // Requests may be larger than the message limit, up to request_limit, so
  // that one with too many tokens is read and refused naming
  // --max-request-tokens; what the router sends keeps the message limit.
  MOE_RETURN_IF_ERROR(Listen("--listen", o_.listen, s.public_credentials, pub,
                             std::max(s.request_limit, s.message_limit),
                             s.message_limit, &port_));
  if (!own_worker_port) return absl::OkStatus();
  MOE_RETURN_IF_ERROR(Listen("--worker-listen", o_.worker_listen,
                             s.worker_credentials, {s.workers}, s.message_limit,
                             s.message_limit, &worker_port_));
  return WritePortFile(o_.worker_port_file, worker_port_);
}

std::vector<grpc::HealthCheckServiceInterface*>
RouterServers::HealthServices() {
  std::vector<grpc::HealthCheckServiceInterface*> out;
  for (auto& s : servers_) out.push_back(s->GetHealthCheckService());
  if (health_) out.push_back(health_->server().GetHealthCheckService());
  return out;
}

void RouterServers::SetStatusesLocked(bool ready, bool full) {
  // Each status by name: the all-services setter would take "liveness"
  // down with readiness, and probes would kill a router that waits for its
  // workers.
  for (grpc::HealthCheckServiceInterface* h : HealthServices()) {
    h->SetServingStatus("", ready);  // overall
    h->SetServingStatus("moe.v1.MoeService", ready);
    // "full-capacity" is SERVING only with every configured worker, and
    // NOT_SERVING while degraded (fewer workers, less capacity), for alerts
    // rather than routing.
    h->SetServingStatus("full-capacity", ready && full);
  }
}

void RouterServers::MarkLive(bool ready, bool full) {
  for (grpc::HealthCheckServiceInterface* h : HealthServices())
    h->SetServingStatus(kLivenessService, true);
  absl::MutexLock lock(&mu_);
  was_ready_ = ready && !draining_;
  SetStatusesLocked(was_ready_, full);
}

void RouterServers::SetReady(bool ready, bool full) {
  absl::MutexLock lock(&mu_);
  if (draining_) ready = false;
  SetStatusesLocked(ready, full);
  if (ready != was_ready_)
    spdlog::info("router {}", ready ? "ready" : "not ready");
  was_ready_ = ready;
}

double RouterServers::Drain(std::chrono::milliseconds wait,
                            const std::function<double()>& inflight,
                            const std::function<void()>& before_cancel) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + wait;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  SetReady(false, false);
  // The public port takes no new calls from now on (clients get GOAWAY and
  // go elsewhere); calls in flight go on, and so do the workers' streams
  // when they share the port. Shutdown returns once they are all done, or
  // cancels what is left at the deadline.
  grpc::Server* pub = servers_.front().get();
  std::atomic<bool> pub_done{false};
  std::thread stop_public([&] {
    pub->Shutdown(std::chrono::system_clock::now() + wait);
    pub_done = true;
  });
  while (inflight() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double left = inflight();
  // The last answers are on their way: let them out, then end what cannot
  // end by itself (worker streams, health watches).
  const auto flush = std::min<Clock::time_point>(
      deadline, Clock::now() + std::chrono::milliseconds(200));
  while (!pub_done && Clock::now() < flush) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  before_cancel();
  if (!pub_done) grpc_server_cancel_all_calls(pub->c_server());
  stop_public.join();
  for (size_t i = 1; i < servers_.size(); ++i) {
    servers_[i]->Shutdown(std::chrono::system_clock::now());
  }
  if (health_) health_->Shutdown();
  return left;
}

}  // namespace moe
