// libFuzzer target: the safetensors header parser on arbitrary file images.
// Any crash, hang or sanitizer report is a bug; errors are fine.
#include <cstddef>
#include <cstdint>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = moe::ParseSafetensors(
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>(data), size),
      "fuzz.safetensors");
  if (header.ok()) {
    // Every accepted tensor must lie inside the file.
    for (const auto& t : header->tensors) {
      if (header->data_start + t.end > size || t.begin > t.end)
        __builtin_trap();
    }
  }
  return 0;
}
