// Bearer-token check for the public API ("authorization: Bearer <token>").
// Tokens are compared as SHA-256 digests with a constant-time compare, so
// neither the token's content nor its length leaks through timing.
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <string>
#include <vector>

namespace moe {

class TokenAuth {
 public:
  // No tokens: every call is allowed.
  explicit TokenAuth(const std::vector<std::string>& tokens);
  bool enabled() const { return !digests_.empty(); }
  // OK, or UNAUTHENTICATED naming what was wrong.
  grpc::Status Check(const grpc::ServerContextBase& ctx) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

}  // namespace moe
