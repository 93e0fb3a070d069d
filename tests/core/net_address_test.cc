#include "core/net_address.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(LocalAddressTowardTest, TargetSpellings) {
  // The gRPC target forms, each naming a loopback host (no name lookup).
  for (const char* target :
       {"127.0.0.1:50051", "dns:///127.0.0.1:50051",
        "dns://8.8.8.8/127.0.0.1:50051", "ipv4:127.0.0.1:5,10.0.0.2:5"}) {
    auto a = LocalAddressToward(target);
    ASSERT_TRUE(a.ok()) << target << ": " << a.status();
    EXPECT_EQ(*a, "127.0.0.1") << target;
  }
}

TEST(LocalAddressTowardTest, LoopbackReachesLoopback) {
  auto a = LocalAddressToward("127.0.0.1:50051");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  auto u = LocalAddressToward("unix:/tmp/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, "127.0.0.1");
}

TEST(LocalAddressTowardTest, BadTargets) {
  EXPECT_FALSE(LocalAddressToward("noport").ok());
  EXPECT_FALSE(LocalAddressToward("no-such-host.invalid:1").ok());
}

TEST(LoopbackTest, Hosts) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("[::1]"));
  EXPECT_TRUE(IsLoopbackHost("::ffff:127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("10.213.0.2"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("worker-0"));
  EXPECT_FALSE(IsLoopbackHost(""));
}

TEST(LoopbackTest, Peers) {
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.0.0.1:43210"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::1]:43210"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:%5B::1%5D:43210"));
  EXPECT_TRUE(IsLoopbackPeer("unix:/tmp/sock"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:10.213.0.3:43210"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:%5Bfd00::3%5D:43210"));
  EXPECT_FALSE(IsLoopbackPeer(""));
}

}  // namespace
}  // namespace moe
