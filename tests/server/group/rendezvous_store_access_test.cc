// Who may use the rendezvous store: each Gloo and NCCL key's rank, the rank
// a token proves (never through an empty or revoked token), and the words of
// a refusal for another generation.
#include "gtest/gtest.h"
#include "server/group/rendezvous_store.h"

namespace moe {
namespace {

TEST(KeyOwnerTest, GlooAndNcclKeysBelongToTheirRank) {
  EXPECT_EQ(KeyOwner("0"), 0);
  EXPECT_EQ(KeyOwner("12"), 12);
  EXPECT_EQ(KeyOwner("3/1"), 3);
  EXPECT_EQ(KeyOwner("rank_2"), 2);
  EXPECT_EQ(KeyOwner("nccl-unique-id"), 0);
  EXPECT_EQ(KeyOwner(""), -1);
  EXPECT_EQ(KeyOwner("x1"), -1);
  EXPECT_EQ(KeyOwner("1x"), -1);
  EXPECT_EQ(KeyOwner("99999999999"), -1);
}

TEST(RankOfTokenTest, TheRankWhoseTokenItIs) {
  const std::vector<std::string> tokens = {"alpha", "beta", "gamma"};
  EXPECT_EQ(RankOfToken(tokens, "alpha"), 0);
  EXPECT_EQ(RankOfToken(tokens, "beta"), 1);
  EXPECT_EQ(RankOfToken(tokens, "gamma"), 2);
  // Another token, a prefix of one, or a longer one: no rank.
  EXPECT_EQ(RankOfToken(tokens, "delta"), -1);
  EXPECT_EQ(RankOfToken(tokens, "bet"), -1);
  EXPECT_EQ(RankOfToken(tokens, "betas"), -1);
  EXPECT_EQ(RankOfToken({}, "alpha"), -1);
}

TEST(RankOfTokenTest, AnEmptyTokenOpensNothing) {
  // Rank 1 was revoked (its token cleared).
  const std::vector<std::string> tokens = {"alpha", "", "gamma"};
  EXPECT_EQ(RankOfToken(tokens, ""), -1);
  EXPECT_EQ(RankOfToken(tokens, "gamma"), 2);
}

TEST(GenerationMismatchTest, SaysWhetherTheGenerationIsOverOrToCome) {
  const absl::Status over = GenerationMismatch("StoreGet", 3, 5);
  EXPECT_EQ(over.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(over.message(),
            "StoreGet for generation 3 refused: generation 3 is over; the "
            "store serves generation 5");
  const absl::Status early = GenerationMismatch("StoreSet", 6, 5);
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(early.message(),
            "StoreSet for generation 6 refused: generation 6 has not "
            "started; the store serves generation 5");
}

}  // namespace
}  // namespace moe
