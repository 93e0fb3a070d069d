#include "core/net_address.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"

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

// The error a process exits with names the flag, the address and the cause.
TEST(ListenFailureTest, NamesTheFlagTheAddressAndTheCause) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  ASSERT_EQ(listen(fd, 4), 0);
  absl::Status s = ListenFailure("--listen", taken);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            absl::StrCat("--listen ", taken,
                         ": address already in use (another process is "
                         "listening there); pick a free port"));
  // Every interface conflicts with the loopback listener too.
  const std::string any = absl::StrCat("0.0.0.0:", ntohs(a.sin_port));
  EXPECT_NE(ListenFailure("--listen", any).message().find("already in use"),
            std::string::npos);
  close(fd);

  // TEST-NET-1: no interface of a test machine has it.
  EXPECT_NE(ListenFailure("--metrics-listen", "192.0.2.1:9090")
                .message()
                .find("--metrics-listen 192.0.2.1:9090: address not "
                      "available"),
            std::string::npos);
  EXPECT_EQ(ListenFailure("--health-listen", "noport").message(),
            "--health-listen noport: expected HOST:PORT");
  // Nothing in the way: the server's own words are kept.
  EXPECT_EQ(ListenFailure("--listen", "127.0.0.1:0", "it said no").message(),
            "--listen 127.0.0.1:0: cannot listen there: it said no");
}

}  // namespace
}  // namespace moe
