#include "proto/health_server.h"

#include <chrono>
#include <string>
#include <vector>

#include "core/net_address.h"
#include "proto/exclusive_ports.h"

namespace moe {
namespace {

// A health-only port tells nothing else: no reflection even where the
// binary links it.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    std::erase_if(*plugins, [](const auto& p) {
      return p->name().find("reflection") != std::string::npos;
    });
  }
};

// Every method but health's: UNIMPLEMENTED, saying what this port is and
// where the API is, rather than gRPC's empty message.
class OtherMethods : public grpc::CallbackGenericService {
 public:
  explicit OtherMethods(std::string message) : message_(std::move(message)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    class Refusal : public grpc::ServerGenericBidiReactor {
     public:
      explicit Refusal(const std::string& message) {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message));
      }
      void OnDone() override { delete this; }
    };
    return new Refusal(ctx->method() + ": " + message_);
  }

 private:
  std::string message_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(
    const std::string& address, const std::string& api_hint) {
  if (absl::Status s = CheckCanListen("--health-listen", address); !s.ok()) {
    return s;
  }
  std::unique_ptr<HealthServer> h(new HealthServer());
  h->service_ = std::make_unique<HealthService>();
  h->service_->SetServingStatus(kLivenessService, true);
  grpc::ServerBuilder b;
  RefuseSharedPorts(b);
  b.AddListeningPort(address, grpc::InsecureServerCredentials(), &h->port_);
  // Our own health service, registered as a service and handed to the
  // builder as the server's health-check service: gRPC's default one is
  // added only beside another service, and without a registered service
  // the callback server refuses to start ("At least one of the completion
  // queues must be frequently polled").
  b.RegisterService(h->service_.get());
  b.SetOption(h->service_->MakeHealthCheckOption());
  b.SetOption(std::make_unique<WithoutReflection>());
  h->others_ = std::make_unique<OtherMethods>(
      "this is a health-only port (--health-listen " + address +
      "): it serves grpc.health.v1 and nothing else" +
      (api_hint.empty() ? std::string() : "; the API is on " + api_hint));
  b.RegisterCallbackGenericService(h->others_.get());
  h->server_ = b.BuildAndStart();
  if (!h->server_ || h->port_ == 0) {
    return ListenFailure("--health-listen", address);
  }
  return h;
}

HealthServer::~HealthServer() { Shutdown(); }

void HealthServer::Shutdown() {
  if (!server_) return;
  service_->Shutdown();
  // Watches never end by themselves: cancel them now.
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
}

}  // namespace moe
