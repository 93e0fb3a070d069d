#include "proto/health_service.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>

namespace moe {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call: writes the watched service's status, then every change.
class HealthService::Watcher
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name)
      : service_(service), name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Writes `status` when it differs from the last one written.
  void Push(ServingStatus status) {
    absl::MutexLock lock(&mu_);
    latest_ = status;
    WriteLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok || cancelled_) return FinishLocked(grpc::Status::CANCELLED);
    WriteLocked();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    // A write in flight finishes the call when it completes.
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    service_->Remove(this);
    delete this;
  }

 private:
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || cancelled_ || latest_ == sent_) return;
    sent_ = latest_;
    response_.set_status(latest_);
    writing_ = true;
    StartWrite(&response_);
  }
  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const service_;
  const std::string name_;
  absl::Mutex mu_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
  ServingStatus latest_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  ServingStatus sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

// What Server::GetHealthCheckService() returns: sets the service's status.
class StatusSetter : public grpc::HealthCheckServiceInterface {
 public:
  explicit StatusSetter(HealthService* service) : service_(service) {}
  void SetServingStatus(const std::string& name, bool serving) override {
    service_->SetServingStatus(name, serving);
  }
  void SetServingStatus(bool serving) override {
    service_->SetServingStatus(serving);
  }
  void Shutdown() override { service_->Shutdown(); }

 private:
  HealthService* const service_;
};

}  // namespace

HealthService::HealthService() {
  absl::MutexLock lock(&mu_);
  statuses_[""] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

std::unique_ptr<grpc::ServerBuilderOption>
HealthService::MakeHealthCheckOption() {
  return std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
      std::make_unique<StatusSetter>(this));
}

HealthService::ServingStatus HealthService::StatusLocked(
    const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                               : it->second;
}

void HealthService::SetLocked(const std::string& service,
                              ServingStatus status) {
  statuses_[service] = status;
  for (Watcher* w : watchers_) {
    if (w->name() == service) w->Push(status);
  }
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  SetLocked(service, serving ? HealthCheckResponse::SERVING
                             : HealthCheckResponse::NOT_SERVING);
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  for (auto& [name, status] : statuses_) {
    if (name == kLivenessService) continue;
    SetLocked(name, serving ? HealthCheckResponse::SERVING
                            : HealthCheckResponse::NOT_SERVING);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (auto& [name, status] : statuses_) {
    SetLocked(name, HealthCheckResponse::NOT_SERVING);
  }
  shutdown_ = true;
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const HealthCheckRequest* req,
                                               HealthCheckResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusLocked(req->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
  } else {
    resp->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext*, const HealthCheckRequest* req) {
  auto* w = new Watcher(this, req->service());
  absl::MutexLock lock(&mu_);
  watchers_.insert(w);
  w->Push(StatusLocked(req->service()));
  return w;
}

void HealthService::Remove(Watcher* w) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(w);
}

}  // namespace moe
