#include "worker/router_connection.h"

#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/net_address.h"
#include "core/thread_slice.h"
#include "proto/connection_hints.h"
#include "proto/keepalive.h"

namespace moe {
namespace {

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

RouterConnection::RouterConnection(RouterConnectionOptions options,
                                   RouterMessageHandler* handler)
    : options_(std::move(options)), handler_(handler) {}

void RouterConnection::Run() {
  while (!control_.stopping()) {
    Session();
    if (!control_.stopping()) {
      std::this_thread::sleep_for(options_.reconnect_delay);
    }
  }
}

absl::StatusOr<std::string> RouterConnection::CollectiveHost() {
  absl::StatusOr<std::string> host =
      options_.collective_host == "auto"
          ? LocalAddressToward(options_.router)
          : absl::StatusOr<std::string>(options_.collective_host);
  if (!host.ok()) return host;
  if (*host != collective_host_) {
    spdlog::info("collective transport on {}{}", *host,
                 options_.collective_host == "auto"
                     ? " (the interface that reaches the router)"
                     : "");
  }
  collective_host_ = *host;
  return host;
}

std::shared_ptr<moe::v1::WorkerControl::Stub> RouterConnection::Dial() const {
  grpc::ChannelArguments args;
  // A dead link ends the stream within seconds; the worker then
  // re-registers.
  AddKeepaliveChannelArgs(args);
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  if (!options_.server_name.empty()) {
    args.SetSslTargetNameOverride(options_.server_name);
  }
  auto creds = options_.credentials ? options_.credentials
                                    : grpc::InsecureChannelCredentials();
  return moe::v1::WorkerControl::NewStub(
      grpc::CreateCustomChannel(options_.router, creds, args));
}

moe::v1::WorkerMessage RouterConnection::Registration(
    const std::string& host) const {
  moe::v1::WorkerMessage hello;
  auto* reg = hello.mutable_register_();
  reg->set_device(options_.device);
  reg->set_threads(options_.threads);
  reg->set_host(HostName());
  reg->set_collective_host(host);
  reg->set_pid(getpid());
  reg->set_device_identity(options_.device_identity);
  reg->set_shares_device(options_.shares_device);
  return hello;
}

void RouterConnection::Session() {
  // Per session: the route to the router (and so the address) can change.
  auto host = CollectiveHost();
  if (!host.ok()) {
    Log(spdlog::level::warn,
        absl::StrCat("collective address toward router ", options_.router, ": ",
                     host.status().message(), "; retrying"));
    return;
  }
  auto stub = Dial();
  grpc::ClientContext ctx;
  if (!options_.auth_token.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + options_.auth_token);
  }
  if (!control_.Begin(&ctx)) return;
  auto rw = stub->Join(&ctx);
  JoinStream stream(rw.get(), stub, *host, control_.stopping_flag());
  bool connected = false;
  if (stream.Write(Registration(*host))) connected = Serve(stream, ctx);
  stream.CloseWrites(/*writes_done=*/true);
  const grpc::Status s = rw->Finish();
  control_.End();
  handler_->SessionEnded();
  if (!control_.stopping()) LogEnd(s, connected);
}

bool RouterConnection::Serve(JoinStream& stream, grpc::ClientContext& ctx) {
  // Heartbeats go out from a thread of their own, also while a step runs,
  // so that the router tells a stopped worker from a busy one.
  std::thread heartbeat([&] { stream.RunHeartbeats(); });
  // Messages are handled in order on one thread; reading goes on meanwhile
  // so that the router's writes do not block on a busy worker. Up to 16
  // wait (the router keeps --max-inflight-steps, 2 by default, steps in
  // flight, plus a few assignments and placements); past that the reads
  // wait, and gRPC's flow control holds the router's writes. Shutdown
  // closes the queue (SessionControl::Stop), which also ends a read's wait.
  BlockingQueue<moe::v1::RouterMessage> queue(16);
  std::thread executor([&] { Execute(queue, stream, ctx); });
  control_.SetQueue(&queue);
  moe::v1::RouterMessage msg;
  bool announced = false;
  while (stream.Read(&msg)) {
    if (!announced) {
      spdlog::info("connected to router {}", options_.router);
      announced = true;
      retry_log_.Reset();
    }
    queue.Push(std::move(msg));
    msg = moe::v1::RouterMessage();
  }
  control_.ReaderDone();
  queue.Close();
  executor.join();
  stream.CloseWrites(/*writes_done=*/false);
  heartbeat.join();
  return announced;
}

void RouterConnection::Execute(BlockingQueue<moe::v1::RouterMessage>& queue,
                               JoinStream& stream, grpc::ClientContext& ctx) {
  while (auto msg = queue.Pop()) {
    if (control_.stopping()) break;  // queued behind the last one
    // Waiting for the next step, this thread wakes as a latency one
    // (core/thread_slice.h); running it, it computes.
    const ScopedThreadRole computing(ThreadRole::kCompute,
                                     ThreadRole::kLatency);
    handler_->Handle(*msg, stream);
  }
  if (!control_.stopping()) return;
  // Shutdown: the last answer is written; closing our side ends the
  // router's Join, and with it this stream. A router that does not answer
  // within a few seconds is cut off.
  spdlog::info("leaving the worker group");
  stream.CloseWrites(/*writes_done=*/true);
  if (!control_.AwaitReaderDone(std::chrono::seconds(5))) ctx.TryCancel();
}

void RouterConnection::Log(spdlog::level::level_enum level,
                           const std::string& line) {
  const std::string text = retry_log_.Next(line, RepeatedLine::Clock::now());
  if (!text.empty()) spdlog::log(level, "{}", text);
}

std::string RouterConnection::UnreachableLine(const grpc::Status& s,
                                              bool connected) const {
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  const std::string& message = s.error_message();
  // A router that refuses the TLS handshake (or a plaintext worker on its
  // TLS port) shows here only as "Socket closed": say what that usually
  // means. Not for a session that got through: that router went away.
  if (!connected && options_.credentials != nullptr &&
      (ClosedByPeer(code, message) || TlsHandshakeFailed(code, message))) {
    return absl::StrCat(
        "router ", options_.router,
        " refused the TLS handshake or closed the connection (", message,
        "): check --tls-ca / --tls-cert / --tls-key match the router's (the "
        "router logs the reason); retrying");
  }
  if (!connected && options_.credentials == nullptr &&
      ClosedByPeer(code, message)) {
    return absl::StrCat("router ", options_.router, " closed the connection (",
                        message,
                        "): its worker port may want TLS (--tls-ca, and "
                        "--tls-cert / --tls-key for mutual TLS); retrying");
  }
  return absl::StrCat("router ", options_.router, " unreachable or gone (",
                      message, "); retrying");
}

void RouterConnection::LogEnd(const grpc::Status& s, bool connected) {
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    // Refused for what this worker is (e.g. a GPU another NCCL worker
    // uses): retrying soon would change nothing.
    Log(spdlog::level::err,
        absl::StrCat("router ", options_.router, " refused this worker: ",
                     s.error_message(), "; retrying in 5 s"));
    for (int i = 0; i < 50 && !control_.stopping(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    // A standby worker (all ranks taken) lands here on every reconnect.
    Log(spdlog::level::info,
        absl::StrCat("router ", options_.router, " has no rank free (",
                     s.error_message(), "); standing by, retrying"));
  } else {
    Log(spdlog::level::warn, UnreachableLine(s, connected));
  }
}

}  // namespace moe
