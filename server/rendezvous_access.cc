#include "server/rendezvous_access.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moe {

int KeyOwner(const std::string& key) {
  if (key == "nccl-unique-id") return 0;
  absl::string_view k = key;
  if (absl::StartsWith(k, "rank_")) k.remove_prefix(5);
  const size_t digits =
      std::find_if(k.begin(), k.end(),
                   [](char c) { return !absl::ascii_isdigit(c); }) -
      k.begin();
  if (digits == 0 || digits > 9) return -1;
  if (digits < k.size() && k[digits] != '/') return -1;
  int rank = -1;
  if (!absl::SimpleAtoi(k.substr(0, digits), &rank)) return -1;
  return rank;
}

int RankOfToken(const std::vector<std::string>& tokens,
                const std::string& token) {
  int rank = -1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    // Every rank is compared, in constant time: the token is a secret.
    const std::string& t = tokens[r];
    if (!t.empty() && t.size() == token.size() &&
        CRYPTO_memcmp(t.data(), token.data(), token.size()) == 0) {
      rank = static_cast<int>(r);
    }
  }
  return rank;
}

absl::Status GenerationMismatch(const char* what, uint64_t asked,
                                uint64_t now) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " for generation ", asked, " refused: generation ",
                   asked, asked < now ? " is over" : " has not started",
                   "; the store serves generation ", now));
}

}  // namespace moe
