// Who may call WorkerControl (Join, StoreSet, StoreGet). A caller that gets
// through can take a worker rank (and with it the model spec and a share of
// every step) or write to the group's rendezvous store, so registration is
// closed whenever the router is configured for it:
// - --worker-token-file: every call carries "authorization: Bearer <token>"
//   with a token from the file (SHA-256 digests, constant-time compare);
// - --tls-ca: the worker port demands a client certificate signed by the CA
//   (checked by the transport before any handler runs).
// Both may be given; then a worker needs both.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "server/api/token_auth.h"

namespace moe {

class WorkerAuth {
 public:
  // With no tokens every call is let through (mutual TLS, if any, has already
  // been checked by the transport).
  explicit WorkerAuth(const std::vector<std::string>& tokens);
  // Returns OK, or UNAUTHENTICATED naming what was wrong, and logs each
  // refusal.
  grpc::Status Check(const grpc::ServerContextBase& ctx,
                     const char* method) const;

 private:
  TokenAuth tokens_;
};

// Runs the check at the top of every WorkerControl handler; a null `auth` lets
// every call through.
grpc::Status CheckWorkerCall(const WorkerAuth* auth,
                             const grpc::ServerContextBase& ctx,
                             const char* method);
// Runs the same check for a callback handler: it returns null when the call may
// go on, else the call's reactor, already finished with the refusal.
grpc::ServerUnaryReactor* RefuseWorkerCall(const WorkerAuth* auth,
                                           grpc::CallbackServerContext* ctx,
                                           const char* method);

}  // namespace moe
