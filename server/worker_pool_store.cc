// WorkerPool: StoreSet and StoreGet, the gRPC side of the rendezvous store
// (server/rendezvous_store.h).
#include <algorithm>

#include "server/moe_service.h"  // ToGrpcStatus
#include "server/worker_pool.h"
#include "server/worker_pool_internal.h"

namespace moe {

void WorkerPool::StoreWait::End(const absl::Status& status,
                                std::vector<std::string> values) {
  for (std::string& v : values) resp_->add_values(std::move(v));
  Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* WorkerPool::StoreSet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreSetRequest* req,
    moe::v1::StoreSetResponse*) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreSet")) return r;
  auto* reactor = ctx->DefaultReactor();
  const absl::Status status = store_.Set(req->generation(), req->store_token(),
                                         req->key(), req->value());
  store_.FinishEnded();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerPool::StoreGet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreGetRequest* req,
    moe::v1::StoreGetResponse* resp) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreGet")) return r;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(
                         req->timeout_ms(), 0, int64_t{24} * 3600 * 1000));
  auto* wait = new StoreWait(&store_, resp);
  const absl::Status refused = store_.Get(
      req->generation(), req->store_token(),
      std::vector<std::string>(req->keys().begin(), req->keys().end()),
      deadline, wait);
  if (!refused.ok()) {
    delete wait;  // never parked
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(refused));
    return reactor;
  }
  {
    absl::MutexLock lock(&mu_);
    ++store_parked_;
    cv_.SignalAll();  // the retry thread keeps the timeouts
  }
  store_.FinishEnded();
  return wait;
}

}  // namespace moe
