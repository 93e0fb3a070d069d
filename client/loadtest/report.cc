#include "client/loadtest/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moe::loadtest {
namespace {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// Log-spaced buckets from the smallest to the largest latency.
std::vector<std::pair<double, int64_t>> Histogram(
    const std::vector<double>& sorted, int buckets) {
  std::vector<std::pair<double, int64_t>> h;
  if (sorted.empty()) return h;
  const double lo = std::max(sorted.front(), 1e-3),
               hi = std::max(sorted.back(), lo * 1.0001);
  const double ratio = std::pow(hi / lo, 1.0 / buckets);
  size_t i = 0;
  for (int b = 1; b <= buckets; ++b) {
    const double upper = b == buckets ? sorted.back() : lo * std::pow(ratio, b);
    int64_t count = 0;
    while (i < sorted.size() && (sorted[i] <= upper || b == buckets)) {
      ++count;
      ++i;
    }
    h.emplace_back(upper, count);
  }
  return h;
}

// What Summarize gathers from the samples before it fills the summary.
struct Tally {
  std::vector<double> ok_lat, admitted_lat, refused_lat, send_delay;
  std::map<std::string, std::vector<double>> stage_samples;
  int64_t tokens = 0;
  double batch_tokens = 0, batch_requests = 0;
};

// One answered request's server-side stage times (server_timing).
void AddStageTimes(const moe::v1::StageTiming& t, Summary& s, Tally& tally) {
  auto add = [&](const char* k, double us) {
    s.stage_us[k] += us;
    tally.stage_samples[k].push_back(us);
  };
  add("queue", t.queue_us());
  add("route", t.route_us());
  add("plan", t.plan_us());
  add("dispatch", t.dispatch_us());
  add("experts", t.experts_us());
  add("combine", t.combine_us());
  add("shared", t.shared_us());
  add("wire", t.wire_us());
  add("total", t.total_us());
  // The exchange with the workers and back, per step: its median is
  // the decode-latency figure (a mean of the two medians is not).
  add("dispatch+combine", t.dispatch_us() + t.combine_us());
  if (t.has_critical_worker()) {
    // The critical worker's own clock (prefixed w_).
    const auto& w = t.critical_worker();
    add("w_decode", w.decode_us());
    add("w_gather", w.gather_us());
    add("w_dispatch_wait", w.dispatch_wait_us());
    add("w_experts", w.experts_us());
    add("w_combine_wait", w.combine_wait_us());
    add("w_sum", w.sum_us());
  }
  tally.batch_tokens += t.batch_tokens();
  tally.batch_requests += t.batch_requests();
}

void CountSample(const Sample& sample, bool server_timing, bool from_scheduled,
                 Summary& s, Tally& tally) {
  Sample x = sample;
  if (from_scheduled) x.latency_ms += x.send_delay_ms;
  tally.send_delay.push_back(x.send_delay_ms);
  ++s.requests;
  s.codes[absl::StatusCodeToString(static_cast<absl::StatusCode>(x.code))]++;
  if (x.code != 0) {
    ++s.errors;
    if (x.code == static_cast<int>(absl::StatusCode::kResourceExhausted)) {
      ++s.refused;
      tally.refused_lat.push_back(x.latency_ms);
    } else {
      tally.admitted_lat.push_back(x.latency_ms);
    }
    return;
  }
  tally.admitted_lat.push_back(x.latency_ms);
  ++s.ok;
  tally.tokens += x.tokens;
  tally.ok_lat.push_back(x.latency_ms);
  if (server_timing) AddStageTimes(x.timing, s, tally);
}

// Means and medians of the stage times and batch sizes over the answered
// requests; rates over the run.
void FillRates(Tally& tally, Summary& s) {
  if (s.ok > 0) {
    for (auto& [k, v] : s.stage_us) v /= s.ok;
    for (auto& [k, v] : tally.stage_samples) {
      std::sort(v.begin(), v.end());
      s.stage_p50_us[k] = Percentile(v, 0.50);
    }
    s.mean_batch_tokens = tally.batch_tokens / s.ok;
    s.mean_batch_requests = tally.batch_requests / s.ok;
  }
  s.error_rate =
      s.requests > 0 ? static_cast<double>(s.errors) / s.requests : 0;
  if (s.seconds > 0) {
    s.requests_per_s = s.requests / s.seconds;
    s.tokens_per_s = tally.tokens / s.seconds;
  }
}

// Latencies of the refusals apart; of the answers, or of every admitted
// request when none was answered.
void FillLatencies(Tally& tally, Summary& s) {
  std::vector<double>& refused_lat = tally.refused_lat;
  std::sort(refused_lat.begin(), refused_lat.end());
  if (!refused_lat.empty()) {
    s.refused_p50_ms = Percentile(refused_lat, 0.50);
    s.refused_p99_ms = Percentile(refused_lat, 0.99);
    s.refused_max_ms = refused_lat.back();
  }
  std::vector<double>& lat =
      tally.ok_lat.empty() ? tally.admitted_lat : tally.ok_lat;
  std::sort(lat.begin(), lat.end());
  if (!lat.empty()) {
    s.min_ms = lat.front();
    s.max_ms = lat.back();
    double sum = 0;
    for (double v : lat) sum += v;
    s.mean_ms = sum / lat.size();
    s.p50_ms = Percentile(lat, 0.50);
    s.p90_ms = Percentile(lat, 0.90);
    s.p95_ms = Percentile(lat, 0.95);
    s.p99_ms = Percentile(lat, 0.99);
  }
  s.histogram = Histogram(lat, 12);
  std::vector<double>& delay = tally.send_delay;
  std::sort(delay.begin(), delay.end());
  if (!delay.empty()) {
    s.send_delay_p50_ms = Percentile(delay, 0.50);
    s.send_delay_p99_ms = Percentile(delay, 0.99);
    s.send_delay_max_ms = delay.back();
  }
}

}  // namespace

Summary Summarize(const RunResult& run, const RunSpec& spec) {
  Summary s;
  s.mode = spec.rps > 0 ? "open" : "closed";
  s.concurrency = spec.rps > 0 ? 0 : spec.concurrency;
  s.target_rps = spec.rps;
  s.stream = spec.stream;
  s.caller_routing = CallerRoutingName(spec.caller_routing);
  s.seconds = run.seconds;
  s.server_timing = spec.server_timing;
  s.error_messages = run.errors;
  const bool open = spec.rps > 0;
  if (open) {
    s.scheduled = run.scheduled;
    s.sent = run.sent;
    s.never_sent = run.never_sent;
    s.late = run.late;
    s.held_by_cap = run.held_by_cap;
    s.max_outstanding = spec.max_outstanding;
    s.late_after_ms =
        std::chrono::duration<double, std::milli>(spec.late_after).count();
    s.offered_rps = spec.rps;
    if (run.send_seconds > 0) s.achieved_rps = run.sent / run.send_seconds;
    if (spec.latency_from_scheduled) s.latency_from = "scheduled";
  }
  if (spec.digest) s.digest = absl::StrFormat("%016x", run.digest);
  Tally tally;
  for (const Sample& x : run.samples) {
    CountSample(x, spec.server_timing, open && spec.latency_from_scheduled, s,
                tally);
  }
  FillRates(tally, s);
  FillLatencies(tally, s);
  return s;
}

std::string FormatText(const Summary& s) {
  std::string out;
  if (s.mode == "open") {
    // What was offered and what went out first: a loop that fell behind
    // says so before any latency.
    absl::StrAppendFormat(
        &out,
        "open loop: offered %.1f req/s, achieved %.1f req/s%s\n"
        "sends      %ld scheduled: %ld sent (%ld late by more than %.1f ms), "
        "%ld never sent; %ld held back by the in-flight cap (%d)\n",
        s.offered_rps, s.achieved_rps,
        s.achieved_rps < 0.95 * s.offered_rps ? ": BEHIND THE OFFERED RATE"
                                              : "",
        static_cast<long>(s.scheduled), static_cast<long>(s.sent),
        static_cast<long>(s.late), s.late_after_ms,
        static_cast<long>(s.never_sent), static_cast<long>(s.held_by_cap),
        s.max_outstanding);
    absl::StrAppendFormat(
        &out, "%s; sends went out p50 %.2f  p99 %.2f  max %.2f ms late\n",
        s.latency_from == "scheduled"
            ? "latency from each request's scheduled send time (coordinated "
              "omission corrected)"
            : "latency from each request's actual send (--latency-from sent: "
              "the wait for a late send is not in it)",
        s.send_delay_p50_ms, s.send_delay_p99_ms, s.send_delay_max_ms);
  } else {
    absl::StrAppendFormat(&out, "closed loop, concurrency %d%s\n",
                          s.concurrency, s.stream ? " (ForwardStream)" : "");
  }
  if (s.caller_routing != "none") {
    absl::StrAppendFormat(&out, "caller routing: every request sends %s\n",
                          s.caller_routing == "routing"
                              ? "a random routing (ForwardRequest.routing)"
                              : "random gate logits (router_logits)");
  }
  absl::StrAppendFormat(
      &out, "requests   %ld in %.2f s: %ld ok, %ld failed (%.2f%%)\n",
      static_cast<long>(s.requests), s.seconds, static_cast<long>(s.ok),
      static_cast<long>(s.errors), 100 * s.error_rate);
  absl::StrAppendFormat(&out, "throughput %.1f requests/s, %.1f tokens/s\n",
                        s.requests_per_s, s.tokens_per_s);
  absl::StrAppendFormat(&out,
                        "latency ms min %.2f  mean %.2f  p50 %.2f  p90 %.2f  "
                        "p95 %.2f  p99 %.2f  max %.2f\n",
                        s.min_ms, s.mean_ms, s.p50_ms, s.p90_ms, s.p95_ms,
                        s.p99_ms, s.max_ms);
  if (s.refused > 0) {
    absl::StrAppendFormat(
        &out,
        "refused    %ld (RESOURCE_EXHAUSTED, not in the latency above): "
        "latency ms p50 %.2f  p99 %.2f  max %.2f\n",
        static_cast<long>(s.refused), s.refused_p50_ms, s.refused_p99_ms,
        s.refused_max_ms);
  }
  if (!s.histogram.empty()) {
    int64_t most = 1;
    for (const auto& [b, c] : s.histogram) most = std::max(most, c);
    out += "latency histogram (ms)\n";
    double lower = s.min_ms;
    for (const auto& [upper, c] : s.histogram) {
      absl::StrAppendFormat(
          &out, "  %9.2f - %9.2f %8ld |%s\n", lower, upper,
          static_cast<long>(c),
          std::string(static_cast<size_t>(40.0 * c / most), '#'));
      lower = upper;
    }
  }
  if (!s.digest.empty()) {
    absl::StrAppendFormat(&out, "requests digest %s\n", s.digest);
  }
  out += "status codes:";
  for (const auto& [code, n] : s.codes)
    absl::StrAppend(&out, " ", code, "=", n);
  out += "\n";
  for (const auto& m : s.error_messages)
    absl::StrAppend(&out, "  error: ", m, "\n");
  if (s.server_timing && s.ok > 0) {
    for (const auto* stat : {&s.stage_us, &s.stage_p50_us}) {
      out += stat == &s.stage_us ? "server stages (mean us):"
                                 : "\nserver stages (p50 us): ";
      for (const char* k : {"queue", "route", "plan", "dispatch", "experts",
                            "combine", "shared", "wire", "total"}) {
        absl::StrAppendFormat(&out, " %s %.0f", k, stat->at(k));
      }
    }
    absl::StrAppendFormat(
        &out, "\nsteps carried %.1f tokens from %.1f requests on average\n",
        s.mean_batch_tokens, s.mean_batch_requests);
  }
  return out;
}

nlohmann::json ToJson(const Summary& s) {
  nlohmann::json j = {{"mode", s.mode},
                      {"concurrency", s.concurrency},
                      {"target_rps", s.target_rps},
                      {"stream", s.stream},
                      {"caller_routing", s.caller_routing},
                      {"seconds", s.seconds},
                      {"requests", s.requests},
                      {"ok", s.ok},
                      {"errors", s.errors},
                      {"error_rate", s.error_rate},
                      {"requests_per_s", s.requests_per_s},
                      {"tokens_per_s", s.tokens_per_s},
                      {"latency_ms",
                       {{"min", s.min_ms},
                        {"mean", s.mean_ms},
                        {"p50", s.p50_ms},
                        {"p90", s.p90_ms},
                        {"p95", s.p95_ms},
                        {"p99", s.p99_ms},
                        {"max", s.max_ms}}},
                      {"refused",
                       {{"count", s.refused},
                        {"p50_ms", s.refused_p50_ms},
                        {"p99_ms", s.refused_p99_ms},
                        {"max_ms", s.refused_max_ms}}},
                      {"status_codes", s.codes},
                      {"error_messages", s.error_messages},
                      {"latency_from", s.latency_from}};
  if (s.mode == "open") {
    j["offered_rps"] = s.offered_rps;
    j["achieved_rps"] = s.achieved_rps;
    j["scheduled"] = s.scheduled;
    j["sent"] = s.sent;
    j["never_sent"] = s.never_sent;
    j["late"] = s.late;
    j["late_after_ms"] = s.late_after_ms;
    j["held_by_cap"] = s.held_by_cap;
    j["max_outstanding"] = s.max_outstanding;
    j["send_delay_ms"] = {{"p50", s.send_delay_p50_ms},
                          {"p99", s.send_delay_p99_ms},
                          {"max", s.send_delay_max_ms}};
  }
  if (!s.digest.empty()) j["digest"] = s.digest;
  nlohmann::json h = nlohmann::json::array();
  for (const auto& [upper, c] : s.histogram)
    h.push_back({{"le_ms", upper}, {"count", c}});
  j["histogram"] = h;
  if (s.server_timing) {
    j["server_stage_us"] = s.stage_us;
    j["server_stage_p50_us"] = s.stage_p50_us;
    j["mean_batch_tokens"] = s.mean_batch_tokens;
    j["mean_batch_requests"] = s.mean_batch_requests;
  }
  return j;
}

std::string CsvHeader() {
  return "Concurrency,Request Rate,Inferences/Second,Tokens/Second,Requests,"
         "Errors,Avg latency,p50 latency,p90 latency,p95 latency,p99 latency,"
         "Max latency,Server Queue,Server Route,Server Dispatch,"
         "Server Experts,Server Combine,Server Shared";
}

std::string CsvRow(const Summary& s) {
  // Latencies in microseconds, as perf_analyzer writes them.
  auto us = [](double ms) {
    return static_cast<int64_t>(std::llround(ms * 1000));
  };
  auto stage = [&](const char* k) {
    auto it = s.stage_us.find(k);
    return it == s.stage_us.end()
               ? int64_t{0}
               : static_cast<int64_t>(std::llround(it->second));
  };
  return absl::StrFormat(
      "%d,%.2f,%.2f,%.2f,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%"
      "ld",
      s.concurrency, s.target_rps, s.requests_per_s, s.tokens_per_s, s.requests,
      s.errors, us(s.mean_ms), us(s.p50_ms), us(s.p90_ms), us(s.p95_ms),
      us(s.p99_ms), us(s.max_ms), stage("queue"), stage("route"),
      stage("dispatch"), stage("experts"), stage("combine"), stage("shared"));
}

}  // namespace moe::loadtest
