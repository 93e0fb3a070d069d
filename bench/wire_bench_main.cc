// moe-wire-bench: the floor under the service's data path, measured on this
// machine in the same run: a memcpy of a payload, and a gRPC echo of the
// same payload (a bare generic service on loopback, the same gRPC library
// and message limits as the service; request in, same bytes back), on one
// channel or split over several. bench/data-path.sh compares the service's
// latency with these.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/flag_help.h"
#include "nlohmann/json.hpp"
#include "proto/exclusive_ports.h"

ABSL_FLAG(int64_t, bytes, 16 << 20, "payload bytes (one way)");
ABSL_FLAG(int, reps, 20, "timed round trips (after 3 warm-up ones)");
ABSL_FLAG(int, channels, 1,
          "split the payload over this many channels, sent at once");

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

// Answers every call with the bytes it was sent.
class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { StartRead(&buf_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        StartWrite(&buf_);
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        StartRead(&buf_);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer buf_;
    };
    return new Reactor;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One round trip of `parts` payloads, one per channel, concurrently.
bool RoundTrip(std::vector<std::unique_ptr<grpc::GenericStub>>& stubs,
               const std::vector<grpc::ByteBuffer>& parts) {
  std::mutex mu;
  std::condition_variable cv;
  size_t left = parts.size();
  bool ok = true;
  std::vector<grpc::ClientContext> ctx(parts.size());
  std::vector<grpc::ByteBuffer> back(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    stubs[i]->UnaryCall(&ctx[i], "/moe.bench.Echo/Echo", {}, &parts[i],
                        &back[i], [&](grpc::Status s) {
                          std::lock_guard<std::mutex> l(mu);
                          ok = ok && s.ok();
                          if (--left == 0) cv.notify_one();
                        });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return left == 0; });
  return ok;
}

int Main() {
  const int64_t bytes = absl::GetFlag(FLAGS_bytes);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int channels = std::max(1, absl::GetFlag(FLAGS_channels));
  if (bytes < 0 || reps < 1) {
    std::fprintf(stderr, "moe-wire-bench: --bytes >= 0, --reps >= 1\n");
    return kExitUsage;
  }
  const int limit = static_cast<int>(
      std::min<int64_t>(bytes + (1 << 20), std::numeric_limits<int>::max()));

  EchoService echo_service;
  grpc::ServerBuilder b;
  RefuseSharedPorts(b);
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterCallbackGenericService(&echo_service);
  b.SetMaxReceiveMessageSize(limit);
  b.SetMaxSendMessageSize(limit);
  auto server = b.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "moe-wire-bench: cannot listen on loopback\n");
    return 1;
  }
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(limit);
    args.SetMaxSendMessageSize(limit);
    // Distinct channels, not one shared connection.
    args.SetInt("moe.bench.channel", c);
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<char> payload(bytes, 1), copy(bytes);
  std::vector<grpc::ByteBuffer> parts;
  for (int c = 0; c < channels; ++c) {
    const int64_t begin = bytes * c / channels;
    const int64_t end = bytes * (c + 1) / channels;
    grpc::Slice slice(payload.data() + begin, end - begin);
    parts.emplace_back(&slice, 1);
  }
  std::vector<double> rtt, memcpy_ms;
  for (int r = 0; r < reps + 3; ++r) {
    auto t0 = Clock::now();
    if (!RoundTrip(stubs, parts)) {
      std::fprintf(stderr, "moe-wire-bench: echo failed\n");
      return 1;
    }
    auto t1 = Clock::now();
    std::memcpy(copy.data(), payload.data(), bytes);
    auto t2 = Clock::now();
    if (bytes > 0) payload[r % bytes] ^= copy[0];  // keep the copy live
    if (r < 3) continue;
    rtt.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    memcpy_ms.push_back(
        std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  server->Shutdown();
  const double echo = Median(rtt), mc = Median(memcpy_ms);
  std::printf(
      "payload %ld bytes over %d channel(s): echo round trip p50 %.3f ms "
      "(%.2f GB/s each way), memcpy p50 %.3f ms\n",
      static_cast<long>(bytes), channels, echo,
      echo > 0 ? 2.0 * bytes / (echo * 1e6) : 0.0, mc);
  nlohmann::json j = {{"bytes", bytes},
                      {"channels", channels},
                      {"echo_rtt_ms", echo},
                      {"memcpy_ms", mc},
                      {"reps", reps}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::ParseOnlyFlagsOrExit(
      argc, argv,
      "moe-wire-bench [--bytes B] [--reps R] [--channels C]: memcpy and a "
      "loopback gRPC echo of the same payload");
  return moe::Main();
}
