// Summaries of a load-test run and their text, JSON and CSV forms.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "client/loadtest/load_runner.h"
#include "nlohmann/json.hpp"

namespace moe::loadtest {

struct Summary {
  std::string mode;  // "closed" or "open"
  int concurrency = 0;
  double target_rps = 0;
  bool stream = false;
  // --caller-routing: "none", "routing" or "logits".
  std::string caller_routing = "none";
  double seconds = 0;
  int64_t requests = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  double error_rate = 0;
  double requests_per_s = 0;  // completed, any status
  double tokens_per_s = 0;    // of successful requests
  // Answered RESOURCE_EXHAUSTED: refused at admission (counted in `errors`
  // too). Their latency is kept apart from the admitted requests'.
  int64_t refused = 0;
  double refused_p50_ms = 0, refused_p99_ms = 0, refused_max_ms = 0;
  // Latency of successful requests (of the admitted ones, refusals apart,
  // when none succeeded), ms; the histogram is of the same requests.
  double min_ms = 0, mean_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0,
         p99_ms = 0, max_ms = 0;
  std::map<std::string, int64_t> codes;
  std::vector<std::string> error_messages;
  std::vector<std::pair<double, int64_t>> histogram;  // (upper bound ms, count)
  // Open loop: the measured schedule's sends (scheduled == sent +
  // never_sent), those sent later than late_after_ms and those held back by
  // the in-flight cap; offered and achieved send rates.
  int64_t scheduled = 0, sent = 0, never_sent = 0, late = 0, held_by_cap = 0;
  int max_outstanding = 0;
  double late_after_ms = 0;
  double offered_rps = 0, achieved_rps = 0;
  // What latency counts from: "scheduled" (each request's scheduled send
  // time, coordinated omission corrected) or "sent" (its actual send).
  std::string latency_from = "sent";
  // Open loop: how long after their scheduled time the sends went out.
  double send_delay_p50_ms = 0, send_delay_p99_ms = 0, send_delay_max_ms = 0;
  // --digest: the sum of the measured requests' digests, 16 hex digits.
  std::string digest;
  bool server_timing = false;
  // Mean per-stage server time (us) over successful requests.
  std::map<std::string, double> stage_us;
  // Median per-stage server time (us) over the same requests.
  std::map<std::string, double> stage_p50_us;
  double mean_batch_tokens = 0;
  double mean_batch_requests = 0;
};

Summary Summarize(const RunResult& run, const RunSpec& spec);
std::string FormatText(const Summary& s);
nlohmann::json ToJson(const Summary& s);
std::string CsvHeader();
std::string CsvRow(const Summary& s);

}  // namespace moe::loadtest
