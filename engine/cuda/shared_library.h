// A CUDA library opened at run time (dlopen) and kept for the life of the
// process, with its functions looked up by name: cuBLASLt and cuBLAS are
// found on the host that runs the binary, so one build serves every CUDA
// 13 host (engine/cuda/cublaslt_api.h, cublas_api.h).
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"

namespace moe {

class SharedLibrary {
 public:
  // `soname` from `dir` (the toolkit's library directory the build saw;
  // skipped when empty), else from the loader's search path. `what` names
  // the library in errors ("cuBLAS").
  static absl::StatusOr<SharedLibrary> Open(const std::string& soname,
                                            const std::string& dir,
                                            const std::string& what);

  // fn = the function `name`; a missing one is remembered for Complete().
  template <typename Fn>
  void Get(Fn& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<Fn>>(Symbol(name));
  }
  // UNAVAILABLE naming every function Get did not find.
  absl::Status Complete() const;

 private:
  SharedLibrary(void* handle, std::string what)
      : handle_(handle), what_(std::move(what)) {}
  void* Symbol(const char* name);

  void* handle_;  // never closed: the functions live as long as the process
  std::string what_;
  std::string missing_;
};

}  // namespace moe
