#include "engine/cuda/step_setup.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr int kParts = 16;  // the CUDA backend's step buffers: 15 and a pass

// A device whose allocations fail from the fail_at-th one on (< 0: never),
// and whose warm-up (the GEMM path measurement) can fail.
struct FakeDevice {
  int fail_at = -1;
  bool fail_warm = false;
  int allocations = 0, live = 0;
};

struct Part {
  explicit Part(FakeDevice* d) : device(d) { ++device->live; }
  ~Part() { --device->live; }
  FakeDevice* device;
};

struct Buffers {
  std::vector<std::unique_ptr<Part>> parts;
  bool warmed = false;
};

absl::StatusOr<std::unique_ptr<Buffers>> MakeBuffers(FakeDevice& d) {
  auto b = std::make_unique<Buffers>();
  for (int i = 0; i < kParts; ++i) {
    if (d.fail_at >= 0 && d.allocations >= d.fail_at) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of device memory at buffer ", i));
    }
    ++d.allocations;
    b->parts.push_back(std::make_unique<Part>(&d));
  }
  return b;
}

absl::Status Warm(FakeDevice& d, Buffers& b) {
  if (d.fail_warm) return absl::InternalError("calibration failed");
  b.warmed = true;
  return absl::OkStatus();
}

// A failure at each point of the first step's setup (each allocation, then
// the warm-up) leaves nothing behind, and the next step sets up whole.
TEST(StepSetup, AFailureAtAnyPointLeavesTheBackendAsBeforeTheStep) {
  for (int point = 0; point <= kParts; ++point) {
    SCOPED_TRACE(point);
    FakeDevice d;
    d.fail_at = point < kParts ? point : -1;
    d.fail_warm = point == kParts;
    StepSetup<Buffers> setup;
    auto make = [&] { return MakeBuffers(d); };
    auto warm = [&](Buffers& b) { return Warm(d, b); };
    EXPECT_FALSE(setup.Ensure(make, warm).ok());
    EXPECT_EQ(setup.get(), nullptr) << "a partial setup was kept";
    EXPECT_EQ(d.live, 0) << "buffers of the failed setup are still held";
    // The device recovers (memory freed elsewhere): the next step sets up.
    d.fail_at = -1;
    d.fail_warm = false;
    d.allocations = 0;
    ASSERT_TRUE(setup.Ensure(make, warm).ok());
    ASSERT_NE(setup.get(), nullptr);
    EXPECT_EQ(setup.get()->parts.size(), static_cast<size_t>(kParts));
    EXPECT_TRUE(setup.get()->warmed);
    EXPECT_EQ(d.allocations, kParts);
    // And later steps allocate nothing.
    ASSERT_TRUE(setup.Ensure(make, warm).ok());
    EXPECT_EQ(d.allocations, kParts);
  }
}

}  // namespace
}  // namespace moe
