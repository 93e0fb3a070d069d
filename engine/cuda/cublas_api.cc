#include "engine/cuda/cublas_api.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cuda/shared_library.h"

#ifndef MOE_CUBLASLT_DIR
#define MOE_CUBLASLT_DIR ""
#endif

namespace moe {
namespace {

absl::StatusOr<CublasApi> Load() {
  // The toolkit's library directory from the build (libcublas lives beside
  // libcublasLt), then the loader's search.
  absl::StatusOr<SharedLibrary> lib =
      SharedLibrary::Open(absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR),
                          MOE_CUBLASLT_DIR, "cuBLAS");
  if (!lib.ok()) return lib.status();
  CublasApi api;
  lib->Get(api.Create, "cublasCreate_v2");
  lib->Get(api.Destroy, "cublasDestroy_v2");
  lib->Get(api.SetStream, "cublasSetStream_v2");
  lib->Get(api.SetWorkspace, "cublasSetWorkspace_v2");
  lib->Get(api.GetStatusString, "cublasGetStatusString");
  lib->Get(api.GemmGroupedBatchedEx, "cublasGemmGroupedBatchedEx");
  if (absl::Status s = lib->Complete(); !s.ok()) return s;
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
