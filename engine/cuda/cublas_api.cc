#include "engine/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

#ifndef MOE_CUBLASLT_DIR
#define MOE_CUBLASLT_DIR ""
#endif

namespace moe {
namespace {

absl::StatusOr<CublasApi> Load() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  // The toolkit's library directory from the build (libcublas lives beside
  // libcublasLt), then the loader's search.
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
    return absl::UnavailableError(absl::StrCat("cannot load cuBLAS: ", tried));
  }
  CublasApi api;
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(lib, name));
    if (fn == nullptr) absl::StrAppend(&missing, " ", name);
  };
  get(api.Create, "cublasCreate_v2");
  get(api.Destroy, "cublasDestroy_v2");
  get(api.SetStream, "cublasSetStream_v2");
  get(api.SetWorkspace, "cublasSetWorkspace_v2");
  get(api.GetStatusString, "cublasGetStatusString");
  get(api.GemmGroupedBatchedEx, "cublasGemmGroupedBatchedEx");
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("cuBLAS lacks:", missing));
  }
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<CublasApi>* loaded =
      new absl::StatusOr<CublasApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace moe
