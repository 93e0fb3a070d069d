// MOE_HOST_DEVICE: a function of the rule headers (routing_rule.h,
// fp8_rule.h) compiled for both the host and the device, so that the CPU
// kernels, the CUDA kernels and the host references share one definition.
#pragma once

#if defined(__CUDACC__)
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif
