// The router's gRPC servers and the one readiness story they all tell: the
// public port (MoeService, and WorkerControl unless the workers have a port
// of their own), the workers' port (--worker-listen) and the plaintext probe
// port (--health-listen). Every port's health service says the same thing;
// `liveness` stays SERVING from start to stop, whatever readiness does. A
// drain takes readiness down for good, stops the public port taking calls,
// lets the calls in flight finish within a deadline, and stops the rest.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/health_server.h"

namespace moe {

class RouterServers {
 public:
  struct Options {
    std::string listen;         // public API, host:port (port 0 picks one)
    std::string worker_listen;  // empty: workers on the public port
    std::string worker_port_file;
    std::string health_listen;  // empty: no probe port
    std::string health_port_file;
    int max_concurrent_streams = 1024;
  };
  // Holds what the public and workers' ports serve, known once the model is
  // loaded and the credentials read.
  struct Services {
    grpc::Service* api = nullptr;
    grpc::Service* workers = nullptr;  // null: no worker port or service
    int message_limit = 4 << 20;       // bytes, both ways
    // Bounds the bytes a message to the public port may have (at least
    // message_limit): room to read a request with too many tokens and refuse it
    // by its token count (router_part_options.h, RequestLimitFor).
    int request_limit = 4 << 20;
    // A null one serves without TLS.
    std::shared_ptr<grpc::ServerCredentials> public_credentials;
    std::shared_ptr<grpc::ServerCredentials> worker_credentials;
  };
  explicit RouterServers(Options o);
  ~RouterServers();

  // Starts the probe port alone, live but NOT_SERVING: a startup probe sees a
  // live router while a large checkpoint loads. Nothing without
  // --health-listen.
  absl::Status StartHealth();
  // Starts the public port serving `s.api`, and `s.workers` on the workers'
  // port when it has one, else on the public port.
  absl::Status Start(const Services& s);
  // Marks `liveness` SERVING on every port, readiness as given (not logged: the
  // starting state).
  void MarkLive(bool ready, bool full);
  // `full`: every configured worker is in the group (not degraded). Logs
  // each change. Never ready again once a drain began.
  void SetReady(bool ready, bool full);

  // Not ready from now on; the public port takes no new calls; waits until
  // `inflight()` is 0 or `wait` has passed, lets the last answers out
  // (200 ms at most), runs `before_cancel` (ends the workers' streams),
  // cancels what is left and stops every server. Returns `inflight()` as it
  // was when the wait ended.
  double Drain(std::chrono::milliseconds wait,
               const std::function<double()>& inflight,
               const std::function<void()>& before_cancel);

  int port() const { return port_; }
  int worker_port() const { return worker_port_; }
  int health_port() const { return health_port_; }

 private:
  void Configure(grpc::ServerBuilder& b, int receive_limit,
                 int send_limit) const;
  // Starts a server serving `services` on `address` (null credentials:
  // insecure), a port no other process shares; UNAVAILABLE naming `flag`,
  // the address and the cause when it cannot (core/net_address.h).
  absl::Status Listen(
      const char* flag, const std::string& address,
      const std::shared_ptr<grpc::ServerCredentials>& credentials,
      const std::vector<grpc::Service*>& services, int receive_limit,
      int send_limit, int* port);
  // Returns the health services of every port (public, workers', probes').
  std::vector<grpc::HealthCheckServiceInterface*> HealthServices();
  void SetStatusesLocked(bool ready, bool full)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options o_;
  // Written only before readiness is first reported (MarkLive).
  std::unique_ptr<HealthServer> health_;                // --health-listen's
  std::vector<std::unique_ptr<grpc::Server>> servers_;  // public first
  int port_ = 0, worker_port_ = 0, health_port_ = 0;
  absl::Mutex mu_;
  bool was_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
