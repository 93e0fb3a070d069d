// Scheduler slices per thread role. On Linux 6.12+ (EEVDF), a waking thread
// preempts the running one only if it asks for a shorter slice; with equal
// slices it waits until the running thread's slice ends, which the kernel
// notices at the next tick (4 ms at HZ=250). On a box where router and
// workers compute on fewer cores than they have busy threads, every hand-off
// in a step (a gRPC read, a queue, a Gloo transport thread, the thread
// waiting on it) could wait a tick behind a computing thread: measured on 2
// cores, half the decode steps' all-to-alls took 2-4 ms instead of 0.2.
// Threads that wake, move a message and sleep take a short slice; threads
// that compute keep the kernel's default. Older kernels ignore the slice.
#pragma once

namespace moe {

// The latency role's slice: the shortest the kernel takes (it clamps custom
// slices to 0.1-100 ms).
inline constexpr double kLatencySliceUs = 100;

enum class ThreadRole {
  kLatency,  // wakes, hands data on, sleeps: a 0.1 ms slice
  kCompute,  // runs the math: the kernel's default slice
};

// Sets the calling thread's slice for `role`, keeping its policy and nice
// value. Threads it creates afterwards inherit it. Returns false where the
// kernel refused (not Linux; a policy other than SCHED_OTHER/SCHED_BATCH).
bool SetThreadRole(ThreadRole role);

// The calling thread's scheduler slice in microseconds as the kernel reports
// it (/proc/thread-self/sched, Linux 6.6+), or -1 where it does not: tells
// whether the latency role took effect (kernels before 6.12 accept the call
// and keep their default slice).
double ThreadSliceUs();

// Sets `role` for the calling thread for the scope's life, then `after`.
class ScopedThreadRole {
 public:
  ScopedThreadRole(ThreadRole role, ThreadRole after) : after_(after) {
    SetThreadRole(role);
  }
  ~ScopedThreadRole() { SetThreadRole(after_); }
  ScopedThreadRole(const ScopedThreadRole&) = delete;
  ScopedThreadRole& operator=(const ScopedThreadRole&) = delete;

 private:
  ThreadRole after_;
};

}  // namespace moe
