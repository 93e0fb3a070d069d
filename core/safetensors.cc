#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

absl::Status Invalid(absl::string_view label, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(label, ": ", what));
}

// Reads a non-negative integer that fits in 63 bits from a JSON value.
bool ReadUnsigned(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out < (1ull << 62);
}

absl::StatusOr<SafetensorsEntry> ParseEntry(absl::string_view label,
                                            const std::string& name,
                                            const json& v, uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!v.is_object()) return Invalid(label, where + " is not a JSON object");
  SafetensorsEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) {
    return Invalid(label, where + " has no string 'dtype'");
  }
  auto parsed = ParseDTypeName(dt->get<std::string>());
  if (!parsed) {
    return Invalid(label, absl::StrCat(where, " has unknown dtype '",
                                       dt->get<std::string>(), "'"));
  }
  e.dtype = *parsed;
  auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array()) {
    return Invalid(label, where + " has no 'shape' array");
  }
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    uint64_t dim;
    if (!ReadUnsigned(d, &dim)) {
      return Invalid(label, where +
                                " has a shape entry that is not a "
                                "non-negative integer");
    }
    if (dim != 0 && numel > (1ull << 62) / dim) {
      return Invalid(label, where +
                                " has a shape whose element count "
                                "overflows");
    }
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  e.numel = numel;
  auto offs = v.find("data_offsets");
  if (offs == v.end() || !offs->is_array() || offs->size() != 2 ||
      !ReadUnsigned((*offs)[0], &e.begin) ||
      !ReadUnsigned((*offs)[1], &e.end)) {
    return Invalid(label, where +
                              " needs 'data_offsets' [begin, end] of "
                              "non-negative integers");
  }
  if (e.begin > e.end) {
    return Invalid(label, absl::StrCat(where, " has data_offsets begin ",
                                       e.begin, " > end ", e.end));
  }
  if (e.end > data_size) {
    return Invalid(label, absl::StrCat(where, " data_offsets end ", e.end,
                                       " is past the data section (", data_size,
                                       " bytes)"));
  }
  const uint64_t want = numel * DTypeSize(e.dtype);
  if (e.end - e.begin != want) {
    return Invalid(label, absl::StrCat(where, " holds ", e.end - e.begin,
                                       " bytes but ", DTypeName(e.dtype), " ",
                                       ShapeString(e.shape), " needs ", want));
  }
  return e;
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<SafetensorsHeader> ParseSafetensors(
    absl::Span<const std::byte> file, absl::string_view label) {
  if (file.size() < 8) {
    return Invalid(label, absl::StrCat("file is ", file.size(),
                                       " bytes, too short for the 8-byte "
                                       "header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint8_t>(file[i]);
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Invalid(label, absl::StrCat("header length ", header_len,
                                       " exceeds the limit of ",
                                       kMaxSafetensorsHeaderBytes));
  }
  if (header_len > file.size() - 8) {
    return Invalid(label, absl::StrCat("header length ", header_len,
                                       " runs past the end of the file (",
                                       file.size(), " bytes)"));
  }
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  json root = json::parse(text, text + header_len, nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid(label, "header is not valid JSON");
  if (!root.is_object()) return Invalid(label, "header is not a JSON object");

  SafetensorsHeader header;
  header.data_start = 8 + header_len;
  const uint64_t data_size = file.size() - header.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) {
        return Invalid(label, "__metadata__ is not a JSON object");
      }
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Invalid(label, absl::StrCat("__metadata__ value of '", m.key(),
                                             "' is not a string"));
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    MOE_ASSIGN_OR_RETURN(SafetensorsEntry entry,
                         ParseEntry(label, it.key(), it.value(), data_size));
    header.tensors.push_back(std::move(entry));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    const auto& prev = header.tensors[i - 1];
    const auto& cur = header.tensors[i];
    if (cur.begin < prev.end) {
      return Invalid(label, absl::StrCat("tensors '", prev.name, "' and '",
                                         cur.name, "' overlap (bytes ",
                                         cur.begin, "..", prev.end, ")"));
    }
  }
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    f->map_ = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map_ == MAP_FAILED) {
      f->map_ = nullptr;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
  }
  ::close(fd);
  MOE_ASSIGN_OR_RETURN(
      f->header_,
      ParseSafetensors(
          absl::MakeConstSpan(static_cast<const std::byte*>(f->map_), f->size_),
          path));
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) {
    f->index_[f->header_.tensors[i].name] = i;
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

bool SafetensorsFile::Has(absl::string_view name) const {
  return index_.count(std::string(name)) > 0;
}

absl::StatusOr<TensorRef> SafetensorsFile::Get(absl::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  TensorRef ref;
  ref.entry = &header_.tensors[it->second];
  ref.data = static_cast<const std::byte*>(map_) + header_.data_start +
             ref.entry->begin;
  ref.file = path_;
  return ref;
}

absl::StatusOr<std::vector<float>> TensorToF32(
    const TensorRef& ref, const std::vector<int64_t>& expected_shape) {
  const auto& e = *ref.entry;
  if (!expected_shape.empty() && e.shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        ref.file, ": tensor '", e.name, "' has shape ", ShapeString(e.shape),
        ", expected ", ShapeString(expected_shape)));
  }
  std::vector<float> out(e.numel);
  if (!ConvertToF32(e.dtype, ref.data, e.numel, out.data())) {
    return absl::InvalidArgumentError(
        absl::StrCat(ref.file, ": tensor '", e.name, "' has dtype ",
                     DTypeName(e.dtype), ", expected a floating-point type"));
  }
  return out;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32(
    absl::string_view name, std::vector<int64_t> expected_shape) const {
  MOE_ASSIGN_OR_RETURN(TensorRef ref, Get(name));
  return TensorToF32(ref, expected_shape);
}

absl::StatusOr<std::vector<int64_t>> SafetensorsFile::ReadI64(
    absl::string_view name) const {
  MOE_ASSIGN_OR_RETURN(TensorRef ref, Get(name));
  if (ref.entry->dtype != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' has dtype ",
                     DTypeName(ref.entry->dtype), ", expected I64"));
  }
  std::vector<int64_t> out(ref.entry->numel);
  if (!out.empty()) std::memcpy(out.data(), ref.data, ref.nbytes());
  return out;
}

void SafetensorsWriter::Add(std::string name, DType dtype,
                            std::vector<int64_t> shape, const void* data,
                            size_t nbytes) {
  tensors_.push_back({std::move(name), dtype, std::move(shape),
                      std::string(static_cast<const char*>(data), nbytes)});
}

void SafetensorsWriter::AddF32(std::string name, std::vector<int64_t> shape,
                               const std::vector<float>& values) {
  Add(std::move(name), DType::kF32, std::move(shape), values.data(),
      values.size() * sizeof(float));
}

void SafetensorsWriter::AddI64(std::string name, std::vector<int64_t> shape,
                               const std::vector<int64_t>& values) {
  Add(std::move(name), DType::kI64, std::move(shape), values.data(),
      values.size() * sizeof(int64_t));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::string SafetensorsWriter::Serialize() const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  // The format pads the header with spaces to an 8-byte boundary.
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out += text;
  for (const auto& t : tensors_) out += t.bytes;
  return out;
}

absl::Status SafetensorsWriter::WriteFile(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open for writing"));
  }
  const std::string bytes = Serialize();
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    return absl::DataLossError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace moe
