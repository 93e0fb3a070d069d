// moe-abuse-client: hostile clients for bench/abuse.sh that moe-loadtest
// does not play.
//   moe-abuse-client --target HOST:PORT --hidden H [--tokens N] [--seconds S]
// opens a ForwardStream, writes requests as fast as the router takes them
// and never reads an answer, for S seconds; prints the requests written.
//   moe-abuse-client --target WORKER_PORT --park-store-gets N [--seconds S]
// tries to park N rendezvous waits (WorkerControl.StoreGet, S s timeout)
// with a made-up generation, then N with the generation the router names
// but no store token, all at once; prints what came back and how many were
// still waiting after S s.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/flag_help.h"
#include "moe/v1/moe.grpc.pb.h"
#include "moe/v1/worker.grpc.pb.h"
#include "proto/tensor_codec.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "service address");
ABSL_FLAG(int64_t, hidden, 1024, "the model's hidden size H");
ABSL_FLAG(int64_t, tokens, 8, "tokens per request");
ABSL_FLAG(int, seconds, 10,
          "how long the stream stays open, or the StoreGets wait");
ABSL_FLAG(int, park_store_gets, 0,
          "instead of the stream: N StoreGet calls at once, twice");

namespace {

using Clock = std::chrono::steady_clock;

struct Wave {
  std::map<std::string, int> codes;
  std::vector<double> ms;  // latency of each answered call
  int pending = 0;         // still waiting after the hold
  std::string message;     // one answer's message
};

// N StoreGet calls at once; waits for them up to `hold`.
Wave StoreGets(moe::v1::WorkerControl::Stub* stub, int n, uint64_t generation,
               int seconds) {
  struct Call {
    grpc::ClientContext ctx;
    moe::v1::StoreGetRequest req;
    moe::v1::StoreGetResponse resp;
    Clock::time_point start;
  };
  std::mutex mu;
  std::condition_variable cv;
  Wave w;
  w.pending = n;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<Call>();
    c->req.set_generation(generation);
    c->req.add_keys(absl::StrCat("abuse/", i));
    c->req.set_timeout_ms(int64_t{seconds} * 1000);
    c->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds + 5));
    c->start = Clock::now();
    Call* raw = c.get();
    stub->async()->StoreGet(
        &raw->ctx, &raw->req, &raw->resp, [raw, &mu, &cv, &w](grpc::Status s) {
          const double ms = std::chrono::duration<double, std::milli>(
                                Clock::now() - raw->start)
                                .count();
          std::lock_guard<std::mutex> lock(mu);
          ++w.codes[absl::StatusCodeToString(
              static_cast<absl::StatusCode>(s.error_code()))];
          w.ms.push_back(ms);
          if (w.message.empty()) w.message = s.error_message();
          --w.pending;
          cv.notify_all();
        });
    calls.push_back(std::move(c));
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::seconds(seconds),
              [&] { return w.pending == 0; });
  Wave out = w;
  for (auto& c : calls) c->ctx.TryCancel();
  cv.wait(lock, [&] { return w.pending == 0; });
  return out;
}

std::string Describe(const Wave& w) {
  std::string codes;
  for (const auto& [c, k] : w.codes) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", c, " ", k);
  }
  std::vector<double> ms = w.ms;
  std::sort(ms.begin(), ms.end());
  const double max = ms.empty() ? 0 : ms.back();
  return absl::StrFormat("%s, slowest answer %.1f ms, %d still waiting", codes,
                         max, w.pending);
}

int ParkStoreGets(const std::string& target, int n, int seconds) {
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = moe::v1::WorkerControl::NewStub(channel);
  // A generation far from any the router has had.
  const Wave fake = StoreGets(stub.get(), n, uint64_t{1} << 62, seconds);
  // "...; the store serves generation G": ask for that one, no token.
  uint64_t generation = 0;
  const std::string key = "serves generation ";
  if (auto at = fake.message.rfind(key); at != std::string::npos) {
    (void)absl::SimpleAtoi(fake.message.substr(at + key.size()), &generation);
  }
  const Wave current = StoreGets(stub.get(), n, generation, seconds);
  std::printf(
      "%d with a made-up generation: %s; %d with generation %lu and no "
      "store token: %s\n",
      n, Describe(fake).c_str(), n, static_cast<unsigned long>(generation),
      Describe(current).c_str());
  return fake.pending == 0 && current.pending == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  moe::ParseOnlyFlagsOrExit(
      argc, argv,
      "moe-abuse-client --target HOST:PORT --hidden H [--tokens N] "
      "[--seconds S]: a ForwardStream that never reads; or "
      "--park-store-gets N: N rendezvous waits without a store token");
  if (const int n = absl::GetFlag(FLAGS_park_store_gets); n > 0) {
    return ParkStoreGets(absl::GetFlag(FLAGS_target), n,
                         absl::GetFlag(FLAGS_seconds));
  }
  const int64_t h = absl::GetFlag(FLAGS_hidden);
  const int64_t n = absl::GetFlag(FLAGS_tokens);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(), args);
  auto stub = moe::v1::MoeService::NewStub(channel);
  std::vector<float> x(n * h, 0.25f);
  moe::v1::ForwardRequest req;
  req.set_request_id("never-read");
  moe::EncodeMatrix(x.data(), n, h, moe::v1::F32, req.mutable_hidden_states());
  grpc::ClientContext ctx;
  std::atomic<long> written{0};
  std::thread writer([&] {
    auto stream = stub->ForwardStream(&ctx);
    while (stream->Write(req)) ++written;
  });
  std::this_thread::sleep_for(
      std::chrono::seconds(absl::GetFlag(FLAGS_seconds)));
  ctx.TryCancel();
  writer.join();
  std::printf("%ld\n", written.load());
  return 0;
}
