// moe-abuse-client: hostile clients for bench/abuse.sh that moe-loadtest
// does not play.
//   moe-abuse-client --target HOST:PORT --hidden H [--tokens N] [--seconds S]
// opens a ForwardStream, writes requests as fast as the router takes them
// and never reads an answer, for S seconds; prints the requests written.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "moe/v1/moe.grpc.pb.h"
#include "proto/tensor_codec.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "service address");
ABSL_FLAG(int64_t, hidden, 1024, "the model's hidden size H");
ABSL_FLAG(int64_t, tokens, 8, "tokens per request");
ABSL_FLAG(int, seconds, 10, "how long the stream stays open");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "moe-abuse-client --target HOST:PORT --hidden H [--tokens N] "
      "[--seconds S]: a ForwardStream that never reads");
  absl::ParseCommandLine(argc, argv);
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
