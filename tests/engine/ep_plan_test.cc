// The step plan's layouts, checked by carrying tags through both
// all-to-alls of every rank's plan in memory: each dispatched row carries
// its global token, each expert output its (token, expert), and every slot
// must come home to the output of its own token and expert. Random
// routings, world sizes 1-4, expert counts that do not divide, slots not
// dispatched, rows scaled per slot, and ranks with no rows.
#include "engine/ep_plan.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/even_split.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

struct Step {
  int64_t tokens = 0, slots = 0, experts = 0;
  std::vector<int32_t> ids;     // [tokens * slots], -1 = not dispatched
  std::vector<int64_t> counts;  // [world * experts]
};

// Top-k without repeats per token, about one slot in eight dropped.
Step RandomStep(std::mt19937_64& rng, int world, int64_t tokens, int64_t slots,
                int64_t experts) {
  Step s;
  s.tokens = tokens;
  s.slots = slots;
  s.experts = experts;
  s.ids.assign(tokens * slots, -1);
  s.counts.assign(world * experts, 0);
  std::vector<int32_t> all(experts);
  for (int64_t e = 0; e < experts; ++e) all[e] = static_cast<int32_t>(e);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    const int src = SplitOwner(t, world, tokens);
    for (int64_t j = 0; j < slots; ++j) {
      if (rng() % 8 == 0) continue;
      s.ids[t * slots + j] = all[j];
      ++s.counts[src * experts + all[j]];
    }
  }
  return s;
}

// Plans every rank, moves the tags as the two exchanges would, and checks
// where each lands.
void CheckRoundTrip(const Step& s, int world, bool one_row_per_token,
                    bool peers_ids) {
  const int64_t S = s.slots, E = s.experts;
  std::vector<EpPlan> plans(world);
  const std::vector<float> rows(std::max<int64_t>(s.tokens, 1), 0.0f);
  const std::vector<float> weights(s.tokens * S, 0.5f);
  for (int r = 0; r < world; ++r) {
    const int64_t b = SplitBegin(r, world, s.tokens);
    const int64_t e = SplitBegin(r + 1, world, s.tokens);
    EpStepInput in;
    in.tokens = e - b;
    in.rows = rows.data();
    in.slots = S;
    in.expert_ids = absl::MakeConstSpan(s.ids).subspan(b * S, (e - b) * S);
    in.weights = absl::MakeConstSpan(weights).subspan(b * S, (e - b) * S);
    in.counts = s.counts;
    if (peers_ids) in.all_expert_ids = s.ids;
    absl::Status st = PlanEpStep(in, r, world, E, s.tokens * S + 1,
                                 one_row_per_token, &plans[r]);
    ASSERT_TRUE(st.ok()) << st;
    // The peers' ids of a step with no tokens are empty, as sent.
    EXPECT_EQ(
        plans[r].one_row_per_token,
        one_row_per_token && ((peers_ids && !s.ids.empty()) || world == 1));
  }
  // Dispatch: rank r's rows to q in order; q's receive buffer holds its
  // sources' blocks in rank order. A tag is the row's global token.
  std::vector<std::vector<int64_t>> recv(world);
  for (int r = 0; r < world; ++r) {
    const EpPlan& p = plans[r];
    ASSERT_EQ(static_cast<int64_t>(p.src_row.size()), p.sent);
    const int64_t base = SplitBegin(r, world, s.tokens);
    int64_t j = 0;
    for (int q = 0; q < world; ++q) {
      ASSERT_EQ(p.send_rows[q], plans[q].recv_rows[r]) << r << "->" << q;
      ASSERT_EQ(p.home_rows[q], plans[q].return_rows[r]) << r << "<-" << q;
      for (int64_t i = 0; i < p.send_rows[q]; ++i) {
        recv[q].push_back(base + p.src_row[j++]);
      }
    }
    if (p.one_row_per_token) {
      // Once per (token, destination): no token twice to one rank.
      std::vector<std::pair<int64_t, int>> seen;
      j = 0;
      for (int q = 0; q < world; ++q) {
        for (int64_t i = 0; i < p.send_rows[q]; ++i) {
          seen.emplace_back(p.src_row[j++], q);
        }
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
    } else {
      EXPECT_EQ(p.sent, p.home);
    }
  }
  // Experts: grouped row i of expert g reads a row whose token has a slot
  // on that expert, and its output, tagged (token, expert), goes to out_row.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out(world);
  for (int q = 0; q < world; ++q) {
    const EpPlan& p = plans[q];
    ASSERT_EQ(static_cast<int64_t>(recv[q].size()), p.arrived);
    out[q].assign(p.received, {-1, -1});
    const int64_t local = p.expert_end - p.expert_begin;
    for (int64_t g = 0; g < local; ++g) {
      for (int64_t i = p.expert_offsets[g]; i < p.expert_offsets[g + 1]; ++i) {
        ASSERT_GE(p.grouped[i], 0);
        ASSERT_LT(p.grouped[i], p.arrived);
        const int64_t token = recv[q][p.grouped[i]];
        const int64_t expert = p.expert_begin + g;
        const int32_t* ids = s.ids.data() + token * S;
        EXPECT_NE(std::find(ids, ids + S, expert), ids + S)
            << "token " << token << " has no slot on expert " << expert;
        ASSERT_GE(p.out_row[i], 0);
        ASSERT_LT(p.out_row[i], p.received);
        EXPECT_EQ(out[q][p.out_row[i]].first, -1) << "two outputs, one row";
        out[q][p.out_row[i]] = {token, expert};
      }
    }
  }
  // Combine: q's outputs to each source in blocks; every slot of rank r
  // finds the output of its own token and expert.
  for (int r = 0; r < world; ++r) {
    const EpPlan& p = plans[r];
    std::vector<std::pair<int64_t, int64_t>> back;
    for (int q = 0; q < world; ++q) {
      int64_t from = 0;
      for (int src = 0; src < r; ++src) from += plans[q].return_rows[src];
      for (int64_t i = 0; i < plans[q].return_rows[r]; ++i) {
        back.push_back(out[q][from + i]);
      }
    }
    ASSERT_EQ(static_cast<int64_t>(back.size()), p.home);
    const int64_t base = SplitBegin(r, world, s.tokens);
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t j = 0; j < S; ++j) {
        const int32_t id = s.ids[(base + t) * S + j];
        const int64_t row = p.slot_row[t * S + j];
        if (id < 0) {
          EXPECT_EQ(row, -1);
          continue;
        }
        ASSERT_GE(row, 0);
        ASSERT_LT(row, p.home);
        EXPECT_EQ(back[row], std::make_pair(base + t, int64_t{id}))
            << "rank " << r << " token " << base + t << " slot " << j;
      }
    }
  }
}

TEST(PlanEpStep, EverySlotComesHomeToItsOwnExpertsOutput) {
  std::mt19937_64 rng(11);
  for (int world = 1; world <= 4; ++world) {
    for (int64_t tokens : {0, 1, 2, 7, 33}) {
      for (const auto& [slots, experts] :
           {std::pair<int64_t, int64_t>{1, 3}, {2, 5}, {4, 7}, {6, 16}}) {
        if (slots > experts) continue;
        const Step s = RandomStep(rng, world, tokens, slots, experts);
        for (bool per_token : {true, false}) {
          for (bool peers : {true, false}) {
            SCOPED_TRACE(absl::StrCat(
                "world ", world, " tokens ", tokens, " k ", slots, " E ",
                experts, per_token ? " per token" : " per slot",
                peers ? " with" : " without", " peers' ids"));
            CheckRoundTrip(s, world, per_token, peers);
          }
        }
      }
    }
  }
}

// A token whose k experts all live on one rank crosses to it once.
TEST(PlanEpStep, AHotRankGetsEachTokenOnce) {
  Step s;
  s.tokens = 6;
  s.slots = 3;
  s.experts = 6;  // two ranks: 0-2 and 3-5
  s.ids = {3, 4, 5, 3, 4, 5, 5, 4, 3, 0, 1, 2, 3, 5, -1, 4, -1, -1};
  s.counts.assign(2 * 6, 0);
  for (int64_t i = 0; i < 18; ++i) {
    if (s.ids[i] >= 0) ++s.counts[SplitOwner(i / 3, 2, 6) * 6 + s.ids[i]];
  }
  CheckRoundTrip(s, 2, true, true);
  const std::vector<float> rows(6, 0.0f), w(9, 0.5f);
  EpStepInput in;
  in.tokens = 3;
  in.rows = rows.data();
  in.slots = 3;
  in.expert_ids = absl::MakeConstSpan(s.ids).subspan(0, 9);
  in.weights = w;
  in.counts = s.counts;
  in.all_expert_ids = s.ids;
  EpPlan p;
  ASSERT_TRUE(PlanEpStep(in, 0, 2, 6, 18, true, &p).ok());
  EXPECT_EQ(p.send_rows, (std::vector<int64_t>{0, 3}));  // not 9
  EXPECT_EQ(p.home_rows, (std::vector<int64_t>{0, 9}));
}

}  // namespace
}  // namespace moe
