// The small synthetic model the worker's handler tests assign: one MoE layer
// of 4 experts, hidden 16, top-2, fp32 weights.
#pragma once

#include "core/model_location.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "moe/v1/worker.pb.h"
#include "proto/model_spec.h"

namespace moe::testing {

inline constexpr int64_t kSmallModelExperts = 4;

inline ModelLocation SmallModelLocation() {
  SyntheticArgs args{.hidden = 16,
                     .inter = 8,
                     .experts = kSmallModelExperts,
                     .top_k = 2,
                     .layers = 1,
                     .seed = 3};
  auto spec = MakeSyntheticSpec(args);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ModelLocation loc;
  if (spec.ok()) loc.synthetic = *spec;
  return loc;
}

// As an Assignment carries it.
inline moe::v1::ModelSpec SmallModel() {
  return ModelSpecFor(SmallModelLocation(), "f32");
}

}  // namespace moe::testing
