// ForwardStreamReactor on an in-process server with a fake Process that
// holds requests until the test answers them: answers in request order
// whatever order they complete in, failed requests answered in band,
// back-pressure by requests and by tokens, a message that does not parse,
// and a refused authorization.
#include "server/api/forward_stream.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "moe/v1/moe.grpc.pb.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using std::chrono::milliseconds;

class StreamService
    : public moe::v1::MoeService::WithRawCallbackMethod_ForwardStream<
          moe::v1::MoeService::Service> {
 public:
  ForwardStreamReactor::Limits limits;
  grpc::Status auth = grpc::Status::OK;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ForwardStream(
      grpc::CallbackServerContext* ctx) override {
    return new ForwardStreamReactor(
        ctx, auth, limits,
        [this](const moe::v1::ForwardRequest& request,
               std::chrono::steady_clock::time_point,
               moe::v1::ForwardResponse* response,
               std::function<void(const grpc::Status&)> done) {
          Run(request, response, std::move(done));
        });
  }

  // Requests whose id starts "fail" fail at once; the others wait for
  // Release while holding (answered at once otherwise).
  void Hold(bool hold) {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = hold;
      if (!hold) now.swap(held_);
    }
    for (auto& f : now) f();
  }
  // Answers held request `i` (in arrival order among those still held).
  void Release(size_t i) {
    std::function<void()> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f = std::move(held_.at(i));
      held_.erase(held_.begin() + static_cast<long>(i));
    }
    f();
  }
  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  void Run(const moe::v1::ForwardRequest& request,
           moe::v1::ForwardResponse* response,
           std::function<void(const grpc::Status&)> done) {
    const std::string id = request.request_id();
    if (id.rfind("fail", 0) == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++calls_;
      }
      return done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               absl::StrCat("refused ", id)));
    }
    auto answer = [id, response, done = std::move(done)] {
      response->set_request_id(id);
      response->mutable_output()->add_shape(1);
      done(grpc::Status::OK);
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
      if (hold_) {
        held_.push_back(std::move(answer));
        return;
      }
    }
    answer();
  }

  std::mutex mu_;
  bool hold_ = true;
  std::vector<std::function<void()>> held_;
  int calls_ = 0;
};

class ForwardStreamTest : public ::testing::Test {
 protected:
  void Start() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    stub_ = moe::v1::MoeService::NewStub(channel_);
  }
  void TearDown() override {
    service_.Hold(false);
    if (server_) server_->Shutdown();
  }

  static moe::v1::ForwardRequest Request(const std::string& id,
                                         int64_t tokens = 1) {
    moe::v1::ForwardRequest r;
    r.set_request_id(id);
    r.mutable_hidden_states()->add_shape(tokens);
    r.mutable_hidden_states()->add_shape(2);
    return r;
  }

  bool Held(size_t n) {
    return testing::WaitFor([&] { return service_.held() == n; },
                            milliseconds(10000));
  }

  StreamService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<moe::v1::MoeService::Stub> stub_;
};

TEST_F(ForwardStreamTest, AnswersInRequestOrderWithFailuresInBand) {
  Start();
  grpc::ClientContext ctx;
  auto stream = stub_->ForwardStream(&ctx);
  for (const char* id : {"a", "fail-b", "c"}) {
    ASSERT_TRUE(stream->Write(Request(id)));
  }
  ASSERT_TRUE(Held(2));
  service_.Release(1);  // c completes first, then a
  service_.Release(0);
  std::vector<std::string> ids;
  moe::v1::ForwardResponse resp;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Read(&resp));
    ids.push_back(resp.request_id());
    if (resp.request_id() == "fail-b") {
      EXPECT_EQ(resp.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_EQ(resp.error_message(), "refused fail-b");
      EXPECT_EQ(resp.output().shape_size(), 0);
    } else {
      EXPECT_EQ(resp.error_code(), 0);
      EXPECT_EQ(resp.output().shape_size(), 1);
    }
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "fail-b", "c"}));
  ASSERT_TRUE(stream->WritesDone());
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Not more than max_inflight requests are read until answers drain.
TEST_F(ForwardStreamTest, ReadsNoMoreThanTheInflightBound) {
  service_.limits.max_inflight = 2;
  Start();
  grpc::ClientContext ctx;
  auto stream = stub_->ForwardStream(&ctx);
  // In-process, a write completes once the server reads it: a writer of
  // its own.
  std::thread writer([&] {
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(stream->Write(Request(absl::StrCat("r", i))));
    }
    stream->WritesDone();
  });
  EXPECT_TRUE(Held(2));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(service_.calls(), 2) << "read past the bound";
  service_.Hold(false);
  moe::v1::ForwardResponse resp;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_EQ(resp.request_id(), absl::StrCat("r", i));
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
}

// The stream's unanswered tokens stop its reading once they reach the
// bound (the request that crosses it is still read).
TEST_F(ForwardStreamTest, ReadsNoMoreThanTheQueuedTokenBound) {
  service_.limits.max_queued_tokens = 4;
  Start();
  grpc::ClientContext ctx;
  auto stream = stub_->ForwardStream(&ctx);
  std::thread writer([&] {
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(stream->Write(Request(absl::StrCat("r", i), /*tokens=*/3)));
    }
    stream->WritesDone();
  });
  EXPECT_TRUE(Held(2));  // 3 tokens < 4: one more; 6 >= 4: stop
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(service_.calls(), 2) << "read past the token bound";
  service_.Release(0);  // 3 tokens left: one more is read
  EXPECT_TRUE(Held(2));
  EXPECT_EQ(service_.calls(), 3);
  service_.Hold(false);
  moe::v1::ForwardResponse resp;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_EQ(resp.request_id(), absl::StrCat("r", i));
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
}

// Raw bytes through the generic stub: a message that is not a
// ForwardRequest ends the stream once the ones before it are answered.
TEST_F(ForwardStreamTest, MessageThatDoesNotParseEndsTheStreamNamingIt) {
  service_.Hold(false);
  Start();
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub.PrepareCall(&ctx, "/moe.v1.MoeService/ForwardStream", &cq);
  auto wait = [&cq](intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(wait(1));
  std::string good;
  ASSERT_TRUE(Request("first").SerializeToString(&good));
  grpc::Slice good_slice(good);
  grpc::ByteBuffer good_buf(&good_slice, 1);
  call->Write(good_buf, reinterpret_cast<void*>(2));
  ASSERT_TRUE(wait(2));
  const std::string bad(11, '\xff');  // a varint that never ends
  grpc::Slice bad_slice(bad);
  grpc::ByteBuffer bad_buf(&bad_slice, 1);
  call->Write(bad_buf, reinterpret_cast<void*>(3));
  ASSERT_TRUE(wait(3));
  grpc::ByteBuffer answer;
  call->Read(&answer, reinterpret_cast<void*>(4));
  ASSERT_TRUE(wait(4));
  moe::v1::ForwardResponse resp;
  ASSERT_TRUE(grpc::SerializationTraits<moe::v1::ForwardResponse>::Deserialize(
                  &answer, &resp)
                  .ok());
  EXPECT_EQ(resp.request_id(), "first");
  call->WritesDone(reinterpret_cast<void*>(5));
  wait(5);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(6));
  ASSERT_TRUE(wait(6));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find(
                "ForwardStream message 1 (counting from 0) is not a valid"),
            std::string::npos)
      << status.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ForwardStreamTest, RefusedAuthorizationEndsTheStreamUnread) {
  service_.auth = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token");
  service_.Hold(false);  // were it read, it would be answered
  Start();
  grpc::ClientContext ctx;
  auto stream = stub_->ForwardStream(&ctx);
  stream->Write(Request("a"));
  stream->WritesDone();
  moe::v1::ForwardResponse resp;
  int answers = 0;
  while (stream->Read(&resp)) ++answers;
  EXPECT_EQ(answers, 0);
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(service_.calls(), 0);
}

}  // namespace
}  // namespace moe
