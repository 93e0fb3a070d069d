// What a load test sends: token counts per request and layers.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::loadtest {

// Tokens per request: "N" (fixed), "A:B" (uniform in [A, B]) or "a,b,c"
// (uniform over the listed values).
class TokenDistribution {
 public:
  static absl::StatusOr<TokenDistribution> Parse(const std::string& text);
  // Any uniform random bit generator.
  template <class Rng>
  int64_t Sample(Rng& rng) const {
    if (!values_.empty()) {
      return values_[std::uniform_int_distribution<size_t>(
          0, values_.size() - 1)(rng)];
    }
    return std::uniform_int_distribution<int64_t>(lo_, hi_)(rng);
  }
  int64_t max() const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  int64_t lo_ = 0, hi_ = 0;
  std::vector<int64_t> values_;  // set for a list
};

// What a request says about its routing: nothing (the
// service's gate routes), a random valid routing of the layer's top_k
// (ForwardRequest.routing), or random gate logits (router_logits).
enum class CallerRouting { kNone, kRouting, kLogits };

// "none", "routing" or "logits" (--caller-routing).
absl::StatusOr<CallerRouting> ParseCallerRouting(const std::string& text);
std::string CallerRoutingName(CallerRouting mode);

// Parses "start:end:step" (step defaults to 1).
absl::StatusOr<std::vector<int>> ParseRange(const std::string& text);

}  // namespace moe::loadtest
