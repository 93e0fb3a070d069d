// Kernel launches that report their own outcome. `kernel<<<...>>>` followed
// by cudaGetLastError() (or cudaPeekAtLastError()) reads the thread's
// last-error state, which also holds errors of earlier, unrelated runtime
// calls (cudaErrorNotReady from an event query, a failed cudaSetDevice):
// such a stale error would fail the launch that happens to read it. The
// status cudaLaunchKernelEx returns belongs to this launch (and, like every
// runtime call, to a sticky context error, after which nothing can run).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace moe::kernels::cuda {

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  const cudaError_t e =
      cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  // A failed launch is also recorded as the thread's last error; it is
  // reported here, so it must not be reported again by a later reader.
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

}  // namespace moe::kernels::cuda
