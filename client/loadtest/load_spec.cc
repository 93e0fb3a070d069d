#include "client/loadtest/load_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::loadtest {

absl::StatusOr<CallerRouting> ParseCallerRouting(const std::string& text) {
  if (text == "none") return CallerRouting::kNone;
  if (text == "routing") return CallerRouting::kRouting;
  if (text == "logits") return CallerRouting::kLogits;
  return absl::InvalidArgumentError(absl::StrCat(
      "--caller-routing '", text, "': expected none, routing or logits"));
}

std::string CallerRoutingName(CallerRouting mode) {
  switch (mode) {
    case CallerRouting::kRouting:
      return "routing";
    case CallerRouting::kLogits:
      return "logits";
    case CallerRouting::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<TokenDistribution> TokenDistribution::Parse(
    const std::string& text) {
  TokenDistribution d;
  d.text_ = text;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens '", text,
                     "': expected N, A:B (uniform) or a,b,c (uniform "
                     "over the list), each >= 0"));
  };
  if (text.find(',') != std::string::npos) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v) || v < 0) return bad();
      d.values_.push_back(v);
    }
    d.lo_ = d.hi_ = d.values_.front();
    for (int64_t v : d.values_) d.hi_ = std::max(d.hi_, v);
    return d;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &d.lo_) || d.lo_ < 0)
    return bad();
  d.hi_ = d.lo_;
  if (parts.size() == 2 &&
      (!absl::SimpleAtoi(parts[1], &d.hi_) || d.hi_ < d.lo_)) {
    return bad();
  }
  return d;
}

int64_t TokenDistribution::max() const { return hi_; }

absl::StatusOr<std::vector<int>> ParseRange(const std::string& text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  int start = 0, end = 0, step = 1;
  if (parts.size() < 2 || parts.size() > 3 ||
      !absl::SimpleAtoi(parts[0], &start) ||
      !absl::SimpleAtoi(parts[1], &end) ||
      (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &step)) || start < 1 ||
      end < start || step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency-range '", text,
                     "': expected start:end[:step], 1 <= start <= end"));
  }
  std::vector<int> out;
  for (int c = start; c <= end; c += step) out.push_back(c);
  return out;
}

}  // namespace moe::loadtest
