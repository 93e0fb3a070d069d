// How the service processes ask glibc for memory. Steps move tens of MiB
// per buffer; glibc serves blocks above its mmap threshold (at most 32 MiB
// even after its dynamic adjustment) with fresh mmap'd pages and returns them
// on free, so every step would fault its large buffers in anew (measured: a
// 4096-token bf16 request spent ~90 ms of 277 in page faults on 2 cores).
// Raising the thresholds keeps freed blocks in the heap for the next step:
// memory stays at the high-water mark of the largest step, which the
// service bounds by --max-batch-tokens anyway. One arena, so that freed
// blocks are shared by the threads that need them (see the .cc for why).
#pragma once

namespace moe {

// Call first thing in main, before any thread starts.
void KeepFreedMemoryForReuse();

}  // namespace moe
