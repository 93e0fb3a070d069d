#include "tests/worker/fake_router.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace moe::testing {

moe::v1::RouterMessage StepMessage(uint64_t generation, uint64_t id) {
  moe::v1::RouterMessage m;
  m.mutable_step()->set_generation(generation);
  m.mutable_step()->set_step_id(id);
  return m;
}

bool IsReady(const moe::v1::WorkerMessage& m) { return m.has_ready(); }
bool IsResult(const moe::v1::WorkerMessage& m) { return m.has_result(); }

FakeRouter::FakeRouter() {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  b.RegisterService(this);
  server_ = b.BuildAndStart();
}

FakeRouter::~FakeRouter() {
  CutOff();
  server_->Shutdown(std::chrono::system_clock::now());
}

std::string FakeRouter::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void FakeRouter::RefuseNext(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  refusals_.push_back(std::move(status));
}

bool FakeRouter::Send(const moe::v1::RouterMessage& msg) {
  absl::MutexLock lock(&mu_);
  auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream_ != nullptr;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&open), absl::Seconds(10))) {
    return false;
  }
  return stream_->Write(msg);
}

void FakeRouter::CutOff() {
  absl::MutexLock lock(&mu_);
  if (ctx_ != nullptr) ctx_->TryCancel();
}

int FakeRouter::joins() const {
  absl::MutexLock lock(&mu_);
  return joins_;
}

int FakeRouter::left() const {
  absl::MutexLock lock(&mu_);
  return left_;
}

std::vector<moe::v1::Register> FakeRouter::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

std::vector<std::string> FakeRouter::tokens() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

size_t FakeRouter::store_keys() const {
  absl::MutexLock lock(&mu_);
  return store_.size();
}

std::vector<moe::v1::WorkerMessage> FakeRouter::received() const {
  absl::MutexLock lock(&mu_);
  return received_;
}

int FakeRouter::CountLocked(bool (*pred)(const moe::v1::WorkerMessage&)) const {
  int n = 0;
  for (const auto& m : received_) n += pred(m);
  return n;
}

bool FakeRouter::AwaitReceived(
    int n, bool (*pred)(const moe::v1::WorkerMessage&)) const {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CountLocked(pred) >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
}

grpc::Status FakeRouter::Join(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
        stream) {
  moe::v1::WorkerMessage hello;
  if (!stream->Read(&hello) || !hello.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no Register");
  }
  {
    absl::MutexLock lock(&mu_);
    ++joins_;
    registrations_.push_back(hello.register_());
    auto auth = ctx->client_metadata().find("authorization");
    tokens_.push_back(
        auth == ctx->client_metadata().end()
            ? ""
            : std::string(auth->second.data(), auth->second.size()));
    if (!refusals_.empty()) {
      const grpc::Status refusal = refusals_.front();
      refusals_.erase(refusals_.begin());
      return refusal;
    }
    ctx_ = ctx;
    stream_ = stream;
  }
  moe::v1::WorkerMessage msg;
  while (stream->Read(&msg)) {
    absl::MutexLock lock(&mu_);
    received_.push_back(msg);
  }
  const bool left = !ctx->IsCancelled();
  absl::MutexLock lock(&mu_);
  left_ += left;
  ctx_ = nullptr;
  stream_ = nullptr;
  return grpc::Status::OK;
}

grpc::Status FakeRouter::StoreSet(grpc::ServerContext* ctx,
                                  const moe::v1::StoreSetRequest* req,
                                  moe::v1::StoreSetResponse* resp) {
  absl::MutexLock lock(&mu_);
  store_[req->key()] = req->value();
  return grpc::Status::OK;
}

grpc::Status FakeRouter::StoreGet(grpc::ServerContext* ctx,
                                  const moe::v1::StoreGetRequest* req,
                                  moe::v1::StoreGetResponse* resp) {
  absl::MutexLock lock(&mu_);
  auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : req->keys()) {
      if (!store_.contains(key)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_set),
                            absl::Milliseconds(req->timeout_ms()))) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "keys not set");
  }
  for (const std::string& key : req->keys()) resp->add_values(store_[key]);
  return grpc::Status::OK;
}

}  // namespace moe::testing
