// Wall time spent in each stage of one MoE step, in microseconds.
#pragma once

#include <chrono>

namespace moe {

// Holds one worker's own clock of a step (StepResult), for the critical one.
struct WorkerStageTimes {
  int rank = -1;  // -1: no workers
  double decode_us = 0;
  double gather_us = 0;
  double dispatch_wait_us = 0;
  double experts_us = 0;
  double combine_wait_us = 0;
  double sum_us = 0;
  double step_us = 0;
};

struct StageTimes {
  double route_us = 0;     // gate GEMM + routing
  double plan_us = 0;      // sort by expert, build dispatch plan
  double dispatch_us = 0;  // permute / all-to-all to experts
  double experts_us = 0;   // grouped SwiGLU
  double combine_us = 0;   // all-to-all back + weighted sum
  double shared_us = 0;    // shared expert
  // Rows between router and workers (no compute), the encoding of the step
  // messages included (StepChannel encodes them as it sends).
  double wire_us = 0;
  double total_us = 0;
  WorkerStageTimes critical_worker;  // the worker whose experts took longest
};

// Measures the time between construction and each Lap() call.
class StageClock {
 public:
  StageClock() : last_(std::chrono::steady_clock::now()) {}
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double us =
        std::chrono::duration<double, std::micro>(now - last_).count();
    last_ = now;
    return us;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

}  // namespace moe
