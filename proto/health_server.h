// The plaintext probe port of the router and the worker (--health-listen):
// a gRPC server with grpc.health.v1 only (no reflection, no other service).
// "liveness" is SERVING from start to Shutdown; the overall status ("") and
// any named service are what the process sets.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/health_service.h"

namespace moe {

class HealthServer {
 public:
  // Listens on `address` (host:port, port 0 picks one), a port of its own
  // (proto/exclusive_ports.h). UNAVAILABLE naming --health-listen, the
  // address and the cause when it cannot.
  // Any other method is answered UNIMPLEMENTED with a message saying this
  // is the health-only port and, from `api_hint` (e.g. "the router's
  // --listen address 127.0.0.1:50051"), where the API is.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(
      const std::string& address, const std::string& api_hint = "");
  ~HealthServer();

  int port() const { return port_; }
  HealthService& service() { return *service_; }
  grpc::Server& server() { return *server_; }
  // NOT_SERVING everywhere, then the server stops (watches end).
  void Shutdown();

 private:
  HealthServer() = default;
  std::unique_ptr<HealthService> service_;
  std::unique_ptr<grpc::CallbackGenericService> others_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace moe
