// A worker's connection to the router: dials it (keepalive, TLS, message
// limits), registers on a Join stream, hands every RouterMessage to a
// handler on one thread and in order while a reader goes on reading (so the
// router's writes never block on a busy worker), sends heartbeats from a
// thread of its own (so a long step does not silence it), and dials again
// when the stream ends, with the retry's log lines kept from flooding.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/blocking_queue.h"
#include "core/logging.h"
#include "moe/v1/worker.grpc.pb.h"
#include "worker/join_stream.h"
#include "worker/repeated_line.h"
#include "worker/session_control.h"

namespace moe {

struct RouterConnectionOptions {
  std::string router;  // host:port
  // Sent at registration: the device, its identity (empty on a CPU) and
  // whether this worker may share it (host-staged exchange).
  std::string device = "cpu";
  std::string device_identity;
  bool shares_device = true;
  int threads = 1;
  // Address the other workers reach this one's collective transport on;
  // "auto": the local address of the interface that reaches the router,
  // looked up at each session.
  std::string collective_host = "auto";
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext
  std::string server_name;  // TLS: name to verify instead of the router's
  // Sent as "authorization: Bearer <token>" on every WorkerControl call
  // (the router's --worker-token-file); empty: none.
  std::string auth_token;
  std::chrono::milliseconds reconnect_delay{500};
  int max_message_bytes = 256 << 20;
};

// What the connection hands the router's messages to.
class RouterMessageHandler {
 public:
  virtual ~RouterMessageHandler() = default;
  // Every message of a session, in order, on one thread; answers go out
  // through `stream`.
  virtual void Handle(const moe::v1::RouterMessage& msg,
                      JoinStream& stream) = 0;
  // The session is over and its writes closed; `Handle` is not running.
  // Threads that write to the stream end here.
  virtual void SessionEnded() = 0;
};

class RouterConnection {
 public:
  // `handler` must outlive the connection.
  RouterConnection(RouterConnectionOptions options,
                   RouterMessageHandler* handler);
  // Sessions until Shutdown().
  void Run();
  // Callable from any thread: ends the session and Run(). The message
  // being handled is finished and answered first; those queued behind it
  // are not started. The worker then closes its stream, and the router
  // regroups without it.
  void Shutdown() { control_.Stop(); }

 private:
  // One Join stream, from dialling to its end.
  void Session();
  std::shared_ptr<moe::v1::WorkerControl::Stub> Dial() const;
  moe::v1::WorkerMessage Registration(const std::string& host) const;
  // Reader, executor and heartbeat threads over a registered stream; true
  // when the router answered.
  bool Serve(JoinStream& stream, grpc::ClientContext& ctx);
  void Execute(BlockingQueue<moe::v1::RouterMessage>& queue, JoinStream& stream,
               grpc::ClientContext& ctx);
  // --collective-host, or with "auto" the local address toward the router;
  // logs when it changes.
  absl::StatusOr<std::string> CollectiveHost();
  // Logs why the session ended (at most once per 10 s when it repeats) and
  // waits before a retry that cannot succeed soon. `connected`: the router
  // answered in this session.
  void LogEnd(const grpc::Status& s, bool connected);
  // The line for a router that could not be reached, or closed on us.
  std::string UnreachableLine(const grpc::Status& s, bool connected) const;
  // Logs `line` at `level`, or leaves it out while it repeats.
  void Log(spdlog::level::level_enum level, const std::string& line);

  const RouterConnectionOptions options_;
  RouterMessageHandler* const handler_;
  SessionControl control_;
  std::string collective_host_;  // the last session's
  // The reconnect path's warnings, repeated while refused or unreachable.
  RepeatedLine retry_log_{std::chrono::seconds(10)};
};

}  // namespace moe
