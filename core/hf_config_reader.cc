#include "core/hf_config_reader.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::Status ConfigReader::Error(absl::string_view key,
                                 absl::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(label_, ": config key '", key, "' ", what));
}

bool ConfigReader::Present(const char* key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

absl::StatusOr<int64_t> ConfigReader::Int(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return Error(key, "is missing");
  if (!it->is_number_integer()) return Error(key, "must be an integer");
  return it->get<int64_t>();
}

absl::StatusOr<int64_t> ConfigReader::Int(const char* key,
                                          int64_t fallback) const {
  return Present(key) ? Int(key) : fallback;
}

absl::StatusOr<double> ConfigReader::Number(const char* key,
                                            double fallback) const {
  if (!Present(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_number()) return Error(key, "must be a number");
  return v.get<double>();
}

absl::StatusOr<bool> ConfigReader::Bool(const char* key, bool fallback) const {
  if (!Present(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_boolean()) return Error(key, "must be true or false");
  return v.get<bool>();
}

absl::StatusOr<std::string> ConfigReader::String(const char* key,
                                                 std::string fallback) const {
  if (!Present(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_string()) return Error(key, "must be a string");
  return v.get<std::string>();
}

}  // namespace moe
