// Reading activation matrices from safetensors files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe {

// A dense row-major fp32 matrix.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
};

// Tensor `name` of the file as fp32 [rows, cols]; it must be 2-D, of a
// floating-point dtype, and hold only finite values.
absl::StatusOr<Matrix> ReadMatrix(const std::string& path,
                                  const std::string& name);

}  // namespace moe
