// Drives a running service: closed loop (a fixed number of users, each
// sending its next request when the last one answered) or open loop
// (requests at a constant or Poisson rate, whatever the answers do).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/loadtest/load_spec.h"
#include "client/moe_client.h"

namespace moe::loadtest {

struct RunSpec {
  // Closed loop when rps == 0.
  int concurrency = 1;
  double rps = 0;
  bool poisson = false;
  int max_outstanding = 1024;  // open loop: in-flight cap
  // Open loop: latency counts from each request's scheduled send time
  // (coordinated omission corrected) unless false (from the actual send).
  bool latency_from_scheduled = true;
  // Open loop: a send this long after its scheduled time counts as late.
  std::chrono::microseconds late_after{1000};
  int64_t requests = 0;  // stop after this many (0: use duration)
  std::chrono::milliseconds duration{10000};
  std::chrono::milliseconds warmup{0};
  std::chrono::milliseconds timeout{30000};
  bool stream = false;  // ForwardStream, one per user (closed loop)
  bool server_timing = false;
  std::vector<int32_t> layers;  // cycled through
  TokenDistribution tokens;
  int64_t hidden = 0;
  moe::v1::DType dtype = moe::v1::F32;
  uint64_t seed = 1;
  // Sum the measured requests' digests (RequestDigest) into the result.
  bool digest = false;
  // --input: captured hidden states [rows, hidden] that every request
  // draws its rows from afresh (with replacement, seeded); null: a pool of
  // synthetic rows drawn the same way.
  std::shared_ptr<const std::vector<float>> rows;
  // > 0: the model is hash-routed (GetModelInfo hash_vocab); every request
  // carries random token ids in [0, hash_vocab), one per row.
  int64_t hash_vocab = 0;
  // >= 0: the model has vision experts (GetModelInfo vision_layers); every
  // request carries token types, each row an image token (1) with this
  // probability, else text (0). < 0: none sent.
  double vision_fraction = -1;
  // --caller-routing: every request carries a random routing of `top_k`
  // distinct experts of `experts` (weights positive, summing to 1) or
  // random gate logits [rows, experts] (GetModelInfo's top_k, experts).
  CallerRouting caller_routing = CallerRouting::kNone;
  int64_t top_k = 0;
  int64_t experts = 0;
};

struct Sample {
  double latency_ms = 0;  // from the send to the answer
  int code = 0;           // grpc::StatusCode
  int64_t tokens = 0;
  moe::v1::StageTiming timing;  // with server_timing
  // Open loop: how long after its scheduled time the request went out.
  double send_delay_ms = 0;
};

struct RunResult {
  std::vector<Sample> samples;
  std::vector<std::string> errors;  // distinct messages, first few
  double seconds = 0;               // measured wall time
  // Open loop, over the measured part of the schedule: sends scheduled,
  // sent, never sent (the run ended first: scheduled == sent +
  // never_sent), sent later than late_after, and held back by the
  // in-flight cap (late or never sent); the seconds sends went out over.
  int64_t scheduled = 0, sent = 0, never_sent = 0, late = 0, held_by_cap = 0;
  double send_seconds = 0;
  // With RunSpec::digest: the sum of the measured requests' digests.
  uint64_t digest = 0;
};

// Live figures for the progress line.
struct Progress {
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> tokens{0};
};

RunResult Run(MoeClient& client, const RunSpec& spec, Progress* progress);

}  // namespace moe::loadtest
