#include "core/net_address.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(TargetHostTest, Spellings) {
  EXPECT_EQ(TargetHost("10.0.0.1:50051"), "10.0.0.1");
  EXPECT_EQ(TargetHost("router:50051"), "router");
  EXPECT_EQ(TargetHost("[fd00::1]:50051"), "fd00::1");
  EXPECT_EQ(TargetHost("dns:///router.ns.svc:50051"), "router.ns.svc");
  EXPECT_EQ(TargetHost("dns://8.8.8.8/router:50051"), "router");
  EXPECT_EQ(TargetHost("ipv4:10.0.0.1:5,10.0.0.2:5"), "10.0.0.1");
  EXPECT_EQ(TargetHost("ipv6:[::1]:5"), "::1");
  EXPECT_EQ(TargetHost("unix:/tmp/sock"), "");
  EXPECT_EQ(TargetHost("noport"), "");
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
