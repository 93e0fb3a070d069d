#include "core/device_spec.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(DeviceSpec, ParsesEverySpelling) {
  auto cpu = ParseDeviceSpec("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->ToString(), "cpu");
  auto cuda = ParseDeviceSpec("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->cuda);
  EXPECT_EQ(cuda->ordinal, 0);
  auto third = ParseDeviceSpec("cuda:3");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->ordinal, 3);
  EXPECT_EQ(third->ToString(), "cuda:3");
}

TEST(DeviceSpec, RejectsOtherSpellingsNamingTheFlag) {
  for (const char* bad :
       {"", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda0", "CPU", "cuda:1:2"}) {
    auto d = ParseDeviceSpec(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("--device"), std::string::npos);
  }
}

}  // namespace
}  // namespace moe
