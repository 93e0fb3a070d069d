// Reading (mmap, fully validated) and writing of safetensors files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace moe {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Offsets relative to the data section.
  uint64_t end = 0;
  uint64_t numel = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // In data order.
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // File offset of the data section.
};

// Largest header accepted; the format's reference reader uses the same.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates a whole safetensors file image: header length, JSON,
// dtypes, shapes, byte counts, offsets inside the data section and not
// overlapping. `label` (usually the path) prefixes every error message.
absl::StatusOr<SafetensorsHeader> ParseSafetensors(
    absl::Span<const std::byte> file, absl::string_view label);

// A view of one tensor's bytes inside a mapped file.
struct TensorRef {
  const SafetensorsEntry* entry = nullptr;
  const std::byte* data = nullptr;
  absl::string_view file;  // For error messages.
  uint64_t nbytes() const { return entry->end - entry->begin; }
};

// A read-only memory-mapped safetensors file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const {
    return header_.metadata;
  }
  bool Has(absl::string_view name) const;
  // NOT_FOUND naming the file and tensor when absent.
  absl::StatusOr<TensorRef> Get(absl::string_view name) const;
  // The tensor converted to fp32; checks the shape when `expected_shape` is
  // not empty.
  absl::StatusOr<std::vector<float>> ReadF32(
      absl::string_view name, std::vector<int64_t> expected_shape = {}) const;
  // Raw little-endian int64 values (I64 tensors only).
  absl::StatusOr<std::vector<int64_t>> ReadI64(absl::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

// Converts a tensor to fp32, checking dtype and (optional) shape.
absl::StatusOr<std::vector<float>> TensorToF32(
    const TensorRef& ref, const std::vector<int64_t>& expected_shape = {});
std::string ShapeString(const std::vector<int64_t>& shape);

// Builds a safetensors file in memory and writes it.
class SafetensorsWriter {
 public:
  void Add(std::string name, DType dtype, std::vector<int64_t> shape,
           const void* data, size_t nbytes);
  void AddF32(std::string name, std::vector<int64_t> shape,
              const std::vector<float>& values);
  void AddI64(std::string name, std::vector<int64_t> shape,
              const std::vector<int64_t>& values);
  void SetMetadata(std::string key, std::string value);
  // The complete file image.
  std::string Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moe
