#include "server/api/token_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/match.h"

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
  if (it == md.end()) return CheckHeader(std::nullopt);
  return CheckHeader(std::string_view(it->second.data(), it->second.size()));
}

grpc::Status TokenAuth::CheckHeader(
    std::optional<std::string_view> authorization) const {
  if (digests_.empty()) return grpc::Status::OK;
  // The header reads "<scheme> <token>": the scheme matches in any case, and
  // one or more spaces follow it.
  constexpr std::string_view kScheme = "bearer";
  std::string_view token;
  bool well_formed = false;
  if (authorization.has_value() && authorization->size() > kScheme.size() &&
      absl::EqualsIgnoreCase(
          absl::string_view(authorization->data(), kScheme.size()),
          absl::string_view(kScheme.data(), kScheme.size())) &&
      (*authorization)[kScheme.size()] == ' ') {
    token = authorization->substr(kScheme.size());
    token.remove_prefix(std::min(token.find_first_not_of(' '), token.size()));
    well_formed = !token.empty();
  }
  if (!well_formed) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: expected metadata 'authorization: "
                        "Bearer <token>'");
  }
  const auto got = Digest(token.data(), token.size());
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
