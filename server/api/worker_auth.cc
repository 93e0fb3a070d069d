#include "server/api/worker_auth.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {

WorkerAuth::WorkerAuth(const std::vector<std::string>& tokens)
    : tokens_(tokens) {}

grpc::Status WorkerAuth::Check(const grpc::ServerContextBase& ctx,
                               const char* method) const {
  grpc::Status s = tokens_.Check(ctx);
  if (s.ok()) return s;
  spdlog::warn("WorkerControl.{} from {} refused: {}", method, ctx.peer(),
               s.error_message());
  return grpc::Status(s.error_code(),
                      absl::StrCat("worker credential required (moe-worker "
                                   "--worker-token-file): ",
                                   s.error_message()));
}

grpc::Status CheckWorkerCall(const WorkerAuth* auth,
                             const grpc::ServerContextBase& ctx,
                             const char* method) {
  return auth != nullptr ? auth->Check(ctx, method) : grpc::Status::OK;
}

grpc::ServerUnaryReactor* RefuseWorkerCall(const WorkerAuth* auth,
                                           grpc::CallbackServerContext* ctx,
                                           const char* method) {
  grpc::Status s = CheckWorkerCall(auth, *ctx, method);
  if (s.ok()) return nullptr;
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

}  // namespace moe
