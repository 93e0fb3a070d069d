#include "worker/router_store.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace moe {
namespace {

[[noreturn]] void Throw(const std::string& what, const grpc::Status& s) {
  throw gloo::IoException(absl::StrCat("rendezvous store ", what, ": ",
                                       s.error_message(), " (code ",
                                       static_cast<int>(s.error_code()), ")"));
}

}  // namespace

void RouterStore::Fail(const std::string& what, const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    retryable_ = false;
  }
  Throw(what, s);
}

void RouterStore::Authorize(grpc::ClientContext* ctx) const {
  if (!auth_token_.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + auth_token_);
  }
}

void RouterStore::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  Authorize(&ctx);
  moe::v1::StoreSetRequest req;
  req.set_generation(generation_);
  req.set_key(key);
  req.set_store_token(token_);
  req.set_value(std::string(data.begin(), data.end()));
  moe::v1::StoreSetResponse resp;
  const grpc::Status s = stub_->StoreSet(&ctx, req, &resp);
  if (!s.ok()) Fail("set '" + key + "'", s);
}

std::vector<std::string> RouterStore::Fetch(
    const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  // The RPC itself may take the whole wait, plus a margin for the network.
  ctx.set_deadline(std::chrono::system_clock::now() + timeout +
                   std::chrono::seconds(2));
  Authorize(&ctx);
  moe::v1::StoreGetRequest req;
  req.set_generation(generation_);
  req.set_store_token(token_);
  for (const auto& k : keys) req.add_keys(k);
  req.set_timeout_ms(timeout.count());
  moe::v1::StoreGetResponse resp;
  const grpc::Status s = stub_->StoreGet(&ctx, req, &resp);
  if (!s.ok()) Fail("get", s);
  return {resp.values().begin(), resp.values().end()};
}

std::vector<char> RouterStore::get(const std::string& key) {
  const std::string v = Fetch({key}, timeout_).at(0);
  return std::vector<char>(v.begin(), v.end());
}

void RouterStore::wait(const std::vector<std::string>& keys) {
  Fetch(keys, timeout_);
}

void RouterStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  Fetch(keys, timeout);
}

std::string AttemptStore::Key(const std::string& key) const {
  return attempt_ <= 1 ? key : absl::StrCat(key, "/a", attempt_);
}

void AttemptStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(Key(key), data);
}

std::vector<char> AttemptStore::get(const std::string& key) {
  return store_.get(Key(key));
}

void AttemptStore::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> k;
  for (const auto& key : keys) k.push_back(Key(key));
  store_.wait(k);
}

void AttemptStore::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  std::vector<std::string> k;
  for (const auto& key : keys) k.push_back(Key(key));
  store_.wait(k, timeout);
}

}  // namespace moe
