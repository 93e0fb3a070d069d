// Which way a row bucket runs the experts' GEMMs (engine/cuda/cuda_experts.h):
// one cuBLASLt matmul per expert and projection (the loop), or one
// cublasGemmGroupedBatchedEx per projection over every expert (grouped).
// Neither wins everywhere (the grouped kernel saves launches at decode
// sizes; the per-expert plans can be faster for large, even groups), so
// each row bucket (engine/cuda/row_bucket.h) is timed both ways on the
// device at its first use and keeps the faster. Plain C++, no CUDA types:
// tested on the CPU.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/cuda/row_bucket.h"

namespace moe {

enum class GemmPath : int8_t { kUnmeasured, kLoop, kGrouped };

inline std::string_view GemmPathName(GemmPath p) {
  switch (p) {
    case GemmPath::kLoop:
      return "loop";
    case GemmPath::kGrouped:
      return "grouped";
    default:
      return "unmeasured";
  }
}

// What was measured for one bucket; times are per expert pass (both
// projections and the SiLU-mul), microseconds, < 0 when not measured.
struct GemmPathChoice {
  int64_t bucket = 0;
  double loop_us = -1, grouped_us = -1;
  GemmPath chosen = GemmPath::kUnmeasured;
};

class GemmPathTable {
 public:
  // kAuto measures; the others force a path (tests, benchmarks).
  enum class Mode : int8_t { kAuto, kLoop, kGrouped };

  explicit GemmPathTable(int64_t max_rows) {
    for (int64_t b : RowBuckets(max_rows)) choices_.push_back({b});
    max_rows_ = max_rows;
  }

  // The path for a pass of `rows` rows: kUnmeasured means "time both now
  // and Record". Rows outside the table, or with the grouped call
  // unavailable, run the loop.
  GemmPath For(int64_t rows) const {
    if (mode_ == Mode::kLoop || !grouped_enabled_) return GemmPath::kLoop;
    if (mode_ == Mode::kGrouped) return GemmPath::kGrouped;
    const GemmPathChoice* c = Find(rows);
    return c == nullptr ? GemmPath::kLoop : c->chosen;
  }

  // The timings of rows' bucket; the faster path wins (the loop on a tie
  // or when grouped_us < 0, i.e. the grouped call failed). Returns the
  // bucket's path: a bucket measured already keeps its first choice, so
  // that every pass sharing the table runs one path per bucket.
  GemmPath Record(int64_t rows, double loop_us, double grouped_us) {
    GemmPathChoice* c = Find(rows);
    const GemmPath p = grouped_us >= 0 && grouped_us < loop_us
                           ? GemmPath::kGrouped
                           : GemmPath::kLoop;
    if (c == nullptr) return p;
    if (c->chosen != GemmPath::kUnmeasured) return c->chosen;
    c->loop_us = loop_us;
    c->grouped_us = grouped_us;
    c->chosen = p;
    return p;
  }

  // After the grouped call failed: every bucket runs the loop from now on.
  void DisableGrouped() { grouped_enabled_ = false; }
  bool grouped_enabled() const { return grouped_enabled_; }

  void set_mode(Mode m) { mode_ = m; }
  Mode mode() const { return mode_; }

  // Every bucket, ascending, measured or not.
  const std::vector<GemmPathChoice>& choices() const { return choices_; }

 private:
  GemmPathChoice* Find(int64_t rows) {
    return const_cast<GemmPathChoice*>(
        static_cast<const GemmPathTable*>(this)->Find(rows));
  }
  const GemmPathChoice* Find(int64_t rows) const {
    if (rows <= 0 || rows > max_rows_) return nullptr;
    const int64_t b = RowBucket(rows, max_rows_);
    for (const GemmPathChoice& c : choices_) {
      if (c.bucket == b) return &c;
    }
    return nullptr;
  }

  std::vector<GemmPathChoice> choices_;
  int64_t max_rows_ = 0;
  Mode mode_ = Mode::kAuto;
  bool grouped_enabled_ = true;
};

// One GemmPathTable shared by every expert pass of one shape on one device
// (the backend's forks, one per step runner, included), so that the same
// request gets the same kernels, hence the same bits, whichever runner
// serves it: the first pass to measure a bucket decides it for all.
// Thread-safe.
class SharedGemmPathTable {
 public:
  // What a table is shared over: the device and the pass's sizes.
  struct Key {
    int device = 0;
    int64_t max_rows = 0, hidden = 0, inter = 0, experts = 0;
    bool fp8 = false;
    bool operator<(const Key& o) const {
      return std::tie(device, max_rows, hidden, inter, experts, fp8) <
             std::tie(o.device, o.max_rows, o.hidden, o.inter, o.experts,
                      o.fp8);
    }
  };

  explicit SharedGemmPathTable(int64_t max_rows) : table_(max_rows) {}

  // The process's table for `key`, made at the first call and kept for the
  // life of the process: a reload or a new fork does not measure again.
  static std::shared_ptr<SharedGemmPathTable> For(const Key& key) {
    static std::mutex mu;
    static std::map<Key, std::shared_ptr<SharedGemmPathTable>>* tables =
        new std::map<Key, std::shared_ptr<SharedGemmPathTable>>();
    std::lock_guard<std::mutex> lock(mu);
    auto& t = (*tables)[key];
    if (t == nullptr) t = std::make_shared<SharedGemmPathTable>(key.max_rows);
    return t;
  }

  GemmPath For(int64_t rows) const {
    std::lock_guard<std::mutex> lock(mu_);
    return table_.For(rows);
  }
  GemmPath Record(int64_t rows, double loop_us, double grouped_us) {
    std::lock_guard<std::mutex> lock(mu_);
    return table_.Record(rows, loop_us, grouped_us);
  }
  void DisableGrouped() {
    std::lock_guard<std::mutex> lock(mu_);
    table_.DisableGrouped();
  }
  bool grouped_enabled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return table_.grouped_enabled();
  }
  GemmPathTable Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return table_;
  }

 private:
  mutable std::mutex mu_;
  GemmPathTable table_;  // always in kAuto mode: users force paths locally
};

}  // namespace moe
