// The load test's requests. Request i is a function of the seed and i only
// (its token count, layer, rows, token ids and caller routing all come from
// a generator seeded with both), so every request draws fresh rows, and two
// runs with one seed send the same requests whichever user sends each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/loadtest/load_spec.h"
#include "moe/v1/moe.pb.h"

namespace moe::loadtest {

struct RunSpec;

// The rows requests draw from, encoded once in the wire dtype: the
// captured rows of --input, or a pool of synthetic ones.
class RequestSource {
 public:
  // Synthetic pools hold this many rows, fewer when they would pass
  // kMaxPoolBytes (as f32): made at start, they must cost little (8-token
  // requests from 1,024 rows still never repeat one another).
  static constexpr int64_t kSyntheticRows = 1024;
  static constexpr int64_t kMaxPoolBytes = int64_t{16} << 20;

  explicit RequestSource(const RunSpec& spec);

  // Fills `req` (cleared first) with request `index`; returns its tokens.
  int64_t Make(uint64_t index, moe::v1::ForwardRequest* req) const;
  int64_t pool_rows() const { return rows_; }

 private:
  const RunSpec& spec_;
  int64_t rows_ = 0;
  size_t row_bytes_ = 0;
  std::string pool_;  // rows_ rows of row_bytes_, in spec.dtype
};

// A 64-bit digest of one request's serialized bytes (stable across runs
// and machines); a run's digest is the sum of its requests', so it does not
// depend on the order the users sent them in.
uint64_t RequestDigest(const moe::v1::ForwardRequest& req);

}  // namespace moe::loadtest
