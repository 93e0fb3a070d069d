#include "engine/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

#ifndef MOE_CUBLASLT_DIR
#define MOE_CUBLASLT_DIR ""
#endif

namespace moe {
namespace {

absl::StatusOr<CublasLtApi> Load() {
  const std::string soname = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
  // The toolkit's directory from the build first, then the loader's search.
  void* lib = nullptr;
  std::string tried;
  for (const std::string& path :
       {std::string(MOE_CUBLASLT_DIR).empty()
            ? std::string()
            : absl::StrCat(MOE_CUBLASLT_DIR, "/", soname),
        soname}) {
    if (path.empty()) continue;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", dlerror());
  }
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot load cuBLASLt: ", tried));
  }
  CublasLtApi api;
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(lib, name));
    if (fn == nullptr) absl::StrAppend(&missing, " ", name);
  };
  get(api.Create, "cublasLtCreate");
  get(api.Destroy, "cublasLtDestroy");
  get(api.GetStatusName, "cublasLtGetStatusName");
  get(api.GetStatusString, "cublasLtGetStatusString");
  get(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  get(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  get(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  get(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  get(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  get(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  get(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  get(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  get(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  get(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  get(api.MatmulAlgoCheck, "cublasLtMatmulAlgoCheck");
  get(api.Matmul, "cublasLtMatmul");
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("cuBLASLt lacks:", missing));
  }
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

absl::StatusOr<const CublasLtApi*> CublasLt() {
  static const absl::StatusOr<CublasLtApi>* loaded =
      new absl::StatusOr<CublasLtApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace moe
