// Typed access to one config.json object (or its text_config) for the
// family readers: every error names the key, what was wrong and the label of
// the file it came from.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moe {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string label)
      : j_(j), label_(std::move(label)) {}

  // INVALID_ARGUMENT "<label>: config key '<key>' <what>".
  absl::Status Error(absl::string_view key, absl::string_view what) const;
  // Whether `key` is given and not null: a null key reads as absent.
  bool Present(const char* key) const;
  absl::StatusOr<int64_t> Int(const char* key) const;
  absl::StatusOr<int64_t> Int(const char* key, int64_t fallback) const;
  absl::StatusOr<double> Number(const char* key, double fallback) const;
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const;
  absl::StatusOr<std::string> String(const char* key,
                                     std::string fallback) const;
  const nlohmann::json& raw() const { return j_; }
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json& j_;
  std::string label_;
};

}  // namespace moe
