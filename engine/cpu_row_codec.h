// The CPU's row codec (engine/row_codec.h): fp32 rows packed as bf16 or FP8
// rows (core/fp8_rows.h) and back, fp32 expert outputs as bf16, on OpenMP
// threads for large steps.
#pragma once

#include <cstdint>

#include "engine/row_codec.h"

namespace moe {

class CpuRowCodec : public RowCodec {
 public:
  CpuRowCodec() = default;
  // Rows of width `hidden`. `rows_from_x`: PackRows reads x's rows by
  // plan.src_row (the backend's Gather wrote no fp32 copy in between);
  // otherwise the gathered rows.
  CpuRowCodec(int threads, int64_t hidden, bool rows_from_x)
      : threads_(threads), hidden_(hidden), rows_from_x_(rows_from_x) {}

  absl::Status PackRows(const EpStepInput& in, const EpPlan& plan,
                        const void* gathered, void* packed) override;
  absl::Status UnpackRows(const EpPlan& plan, const void* packed,
                          void* rows) override;
  absl::Status PackOutputs(const EpPlan& plan, const void* out,
                           void* packed) override;

 private:
  int threads_ = 1;
  int64_t hidden_ = 0;
  bool rows_from_x_ = false;
};

}  // namespace moe
