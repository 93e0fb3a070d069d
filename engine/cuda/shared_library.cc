#include "engine/cuda/shared_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<SharedLibrary> SharedLibrary::Open(const std::string& soname,
                                                  const std::string& dir,
                                                  const std::string& what) {
  std::string tried;
  for (const std::string& path :
       {dir.empty() ? std::string() : absl::StrCat(dir, "/", soname), soname}) {
    if (path.empty()) continue;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      return SharedLibrary(handle, what);
    }
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", dlerror());
  }
  return absl::UnavailableError(
      absl::StrCat("cannot load ", what, ": ", tried));
}

void* SharedLibrary::Symbol(const char* name) {
  void* fn = dlsym(handle_, name);
  if (fn == nullptr) absl::StrAppend(&missing_, " ", name);
  return fn;
}

absl::Status SharedLibrary::Complete() const {
  if (missing_.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what_, " lacks:", missing_));
}

}  // namespace moe
