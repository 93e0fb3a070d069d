#include "engine/cuda/cublaslt_api.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cuda/shared_library.h"

#ifndef MOE_CUBLASLT_DIR
#define MOE_CUBLASLT_DIR ""
#endif

namespace moe {
namespace {

absl::StatusOr<CublasLtApi> Load() {
  // The toolkit's directory from the build first, then the loader's search.
  absl::StatusOr<SharedLibrary> lib =
      SharedLibrary::Open(absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR),
                          MOE_CUBLASLT_DIR, "cuBLASLt");
  if (!lib.ok()) return lib.status();
  CublasLtApi api;
  lib->Get(api.Create, "cublasLtCreate");
  lib->Get(api.Destroy, "cublasLtDestroy");
  lib->Get(api.GetStatusName, "cublasLtGetStatusName");
  lib->Get(api.GetStatusString, "cublasLtGetStatusString");
  lib->Get(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  lib->Get(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  lib->Get(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  lib->Get(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  lib->Get(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  lib->Get(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  lib->Get(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  lib->Get(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  lib->Get(api.MatmulPreferenceSetAttribute,
           "cublasLtMatmulPreferenceSetAttribute");
  lib->Get(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  lib->Get(api.MatmulAlgoCheck, "cublasLtMatmulAlgoCheck");
  lib->Get(api.Matmul, "cublasLtMatmul");
  if (absl::Status s = lib->Complete(); !s.ok()) return s;
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
