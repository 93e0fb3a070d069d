#include "core/tensor_io.h"

#include "absl/strings/str_cat.h"
#include "core/finite_check.h"
#include "core/safetensors.h"
#include "core/status_macros.h"

namespace moe {
namespace {

// Index of the first non-finite value, or -1.
int64_t FirstNonFinite(const float* v, int64_t n) {
  // One row of n: the vectorised check first, the position only if needed.
  if (FirstNonFiniteRow(v, 1, n) < 0) return -1;
  return FirstNonFiniteInRow(DType::kF32, v, n);
}

}  // namespace

absl::StatusOr<Matrix> ReadMatrix(const std::string& path,
                                  const std::string& name) {
  MOE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  MOE_ASSIGN_OR_RETURN(TensorRef ref, file->Get(name));
  if (ref.entry->shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor '", name, "' has shape ",
                     ShapeString(ref.entry->shape), ", expected [N, H]"));
  }
  Matrix m;
  m.rows = ref.entry->shape[0];
  m.cols = ref.entry->shape[1];
  MOE_ASSIGN_OR_RETURN(m.data, TensorToF32(ref));
  const int64_t bad = FirstNonFinite(m.data.data(), m.rows * m.cols);
  if (bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor '", name, "' has a non-finite value at [",
                     bad / m.cols, ", ", bad % m.cols, "]"));
  }
  return m;
}

}  // namespace moe
