// A collective connect retried within one generation: each attempt uses
// keys of its own ("R/aN" after the first), so a retry never reads the
// address a peer published for an attempt it abandoned, and the ranks meet
// at the first attempt they both make.
#include <chrono>
#include <thread>

#include "comm/gloo_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "server/group/rendezvous_store.h"
#include "worker/router_store.h"

namespace moe {
namespace {

using std::chrono::milliseconds;

TEST(AttemptStoreTest, RetryUsesFreshKeysOwnedByTheSameRank) {
  gloo::rendezvous::HashStore store;
  // Rank 1's first attempt: rank 0 is not there (stopped); it gives up
  // after a short connect timeout.
  absl::StatusOr<std::unique_ptr<Communicator>> first, second, peer;
  std::thread rank1([&] {
    AttemptStore a1(store, 1);
    first = CreateGlooCommunicator(1, 2, "127.0.0.1", a1, milliseconds(300));
    AttemptStore a2(store, 2);
    second = CreateGlooCommunicator(1, 2, "127.0.0.1", a2, milliseconds(10000));
  });
  std::this_thread::sleep_for(milliseconds(600));
  // Rank 0 comes back and joins on attempt 2.
  AttemptStore a2(store, 2);
  peer = CreateGlooCommunicator(0, 2, "127.0.0.1", a2, milliseconds(10000));
  rank1.join();
  EXPECT_FALSE(first.ok());
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(peer.ok()) << peer.status();
  // Attempt 2's keys are the router's to check like the first ones.
  for (const std::string& key : {"1/a2", "0/a2"}) {
    EXPECT_EQ(KeyOwner(key), key[0] - '0') << key;
  }
  EXPECT_EQ(KeyOwner("rank_1/a3"), 1);
  // They connected: an all-to-all goes through.
  std::vector<float> s0 = {1, 2}, s1 = {3, 4}, r0(2), r1(2);
  std::vector<int64_t> counts = {1, 1};
  absl::Status st1;
  std::thread x([&] {
    st1 = (*second)->AllToAllV(s1.data(), counts, r1.data(), counts,
                               ElementType::kF32, milliseconds(5000), nullptr);
  });
  absl::Status st0 =
      (*peer)->AllToAllV(s0.data(), counts, r0.data(), counts,
                         ElementType::kF32, milliseconds(5000), nullptr);
  x.join();
  ASSERT_TRUE(st0.ok()) << st0;
  ASSERT_TRUE(st1.ok()) << st1;
  EXPECT_EQ(r0, (std::vector<float>{1, 3}));
  EXPECT_EQ(r1, (std::vector<float>{2, 4}));
}

}  // namespace
}  // namespace moe
