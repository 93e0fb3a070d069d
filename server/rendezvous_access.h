// Who may use the rendezvous store of a generation: the rank a key belongs
// to, the rank a store token proves (compared in constant time: the tokens
// are secrets), and the refusal of a call made for another generation.
// Pure functions; the store applies them under its lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe {

// The rank whose rendezvous key `key` is, or -1 for a key of no rank:
// Gloo's pair addresses ("R", "R/S", "rank_R": the keys
// gloo::rendezvous::Context::connectFullMesh sets, across Gloo versions) are
// rank R's; NCCL's unique id ("nccl-unique-id") is rank 0's.
int KeyOwner(const std::string& key);

// The rank r whose token tokens[r] is `token`, or -1 when none is (an
// empty token, a revoked rank's, opens nothing).
int RankOfToken(const std::vector<std::string>& tokens,
                const std::string& token);

// FAILED_PRECONDITION for a store call (`what`) of generation `asked` when
// the store serves generation `now`.
absl::Status GenerationMismatch(const char* what, uint64_t asked, uint64_t now);

}  // namespace moe
