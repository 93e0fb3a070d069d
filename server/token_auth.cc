#include "server/token_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace moe {
namespace {

std::array<unsigned char, 32> Digest(const char* data, size_t size) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(data), size, d.data());
  return d;
}

}  // namespace

TokenAuth::TokenAuth(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) digests_.push_back(Digest(t.data(), t.size()));
}

grpc::Status TokenAuth::Check(const grpc::ServerContextBase& ctx) const {
  if (digests_.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  constexpr char kBearer[] = "Bearer ";
  constexpr size_t kPrefix = sizeof(kBearer) - 1;
  if (it == md.end() || it->second.size() <= kPrefix ||
      it->second.substr(0, kPrefix) != kBearer) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: expected metadata 'authorization: "
                        "Bearer <token>'");
  }
  const auto got =
      Digest(it->second.data() + kPrefix, it->second.size() - kPrefix);
  bool match = false;
  // Every digest is compared, match or not, in constant time.
  for (const auto& d : digests_) {
    match |= CRYPTO_memcmp(got.data(), d.data(), d.size()) == 0;
  }
  return match ? grpc::Status::OK
               : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                              "authorization: the bearer token is not valid");
}

}  // namespace moe
