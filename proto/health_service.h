// grpc.health.v1.Health as a service of its own (callback API), for the
// plaintext probe port (--health-listen): that port serves health only, no
// reflection. gRPC's default health service is added only to a server that
// has some other service, so a health-only server registers this one and
// hands its status setter to the builder (MakeHealthCheckOption), which
// keeps the default one out; Server::GetHealthCheckService() then sets this
// service's statuses.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace moe {

// The service that is SERVING while the process runs (probes' liveness).
inline constexpr char kLivenessService[] = "liveness";

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService();
  ~HealthService() override;

  // A service's status ("" is the server's overall one); unknown services
  // are NOT_FOUND to Check and SERVICE_UNKNOWN to Watch until set.
  void SetServingStatus(const std::string& service, bool serving);
  // Every known service except "liveness", which says only that the
  // process runs: it stays SERVING until Shutdown, whatever readiness
  // does (a probe that kills on it must not kill a process that waits for
  // its peers).
  void SetServingStatus(bool serving);
  // NOT_SERVING for good (further sets are ignored).
  void Shutdown();

  // The builder option that makes a server report through this service
  // (instead of creating gRPC's default one).
  std::unique_ptr<grpc::ServerBuilderOption> MakeHealthCheckOption();

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* ctx,
      const grpc::health::v1::HealthCheckRequest* req,
      grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx,
      const grpc::health::v1::HealthCheckRequest* req) override;

 private:
  class Watcher;
  ServingStatus StatusLocked(const std::string& service) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SetLocked(const std::string& service, ServingStatus status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(Watcher* w);

  absl::Mutex mu_;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
