// moe-loadtest: drives a running MoE service and reports throughput and
// latency, in the spirit of ghz and Triton's perf_analyzer.
//   moe-loadtest --target HOST:PORT -c 32 -z 10s --tokens 8
//   moe-loadtest --target HOST:PORT --rps 200 --arrival poisson -n 5000
//   moe-loadtest --target HOST:PORT --concurrency-range 1:64:8 -z 5s --format
//   csv
// Exits 1 when requests failed beyond --max-error-rate (default: any), 2
// when p99 is above --max-p99-ms, 64 on usage errors.
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/loadtest/load_runner.h"
#include "client/loadtest/report.h"
#include "client/moe_client.h"
#include "core/flag_help.h"
#include "core/status_macros.h"
#include "core/tensor_io.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "service address host:port");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA to verify the server with (turns on TLS)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(
    std::string, tls_server_name, "",
    "name to verify in the server's certificate instead of the target host");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding the bearer token to send");
ABSL_FLAG(std::string, layer, "0",
          "MoE layer: a number, a list (0,2,5) or 'all' (spread over every MoE "
          "layer)");
ABSL_FLAG(int, concurrency, 1, "closed loop: concurrent users (-c)");
ABSL_FLAG(int64_t, requests, 0, "stop after this many measured requests (-n)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10),
          "measure for this long (-z), unless --requests is given");
ABSL_FLAG(double, rps, 0, "open loop: requests per second (0: closed loop)");
ABSL_FLAG(std::string, arrival, "constant",
          "open loop arrivals: constant or poisson");
ABSL_FLAG(int, max_outstanding, 1024, "open loop: requests in flight at most");
ABSL_FLAG(std::string, latency_from, "scheduled",
          "open loop: latency counts from each request's scheduled send time "
          "(scheduled: coordinated omission corrected) or its actual send "
          "(sent)");
ABSL_FLAG(double, late_after_ms, 1.0,
          "open loop: a send this long after its scheduled time counts as "
          "late");
ABSL_FLAG(bool, digest, false,
          "report a digest of the measured requests' bytes (the same for two "
          "runs with one --seed and -n)");
ABSL_FLAG(std::string, tokens, "8", "tokens per request: N, A:B or a,b,c");
ABSL_FLAG(absl::Duration, warmup, absl::ZeroDuration(),
          "unmeasured warm-up time");
ABSL_FLAG(int64_t, timeout_ms, 30000, "deadline of each request");
ABSL_FLAG(bool, stream, false, "use ForwardStream (one stream per user)");
ABSL_FLAG(std::string, concurrency_range, "",
          "sweep closed-loop concurrency start:end[:step], one run each");
ABSL_FLAG(std::string, format, "text", "report: text, json or csv");
ABSL_FLAG(std::string, dtype, "f32", "wire dtype: f32, bf16 or f16");
ABSL_FLAG(bool, server_timing, false,
          "ask for and report the server's stage times");
ABSL_FLAG(double, max_p99_ms, 0,
          "fail (exit 2) when p99 latency is above (0: off)");
ABSL_FLAG(double, max_error_rate, 0,
          "failed fraction tolerated (default none)");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(1),
          "progress line period");
ABSL_FLAG(uint64_t, seed, 1, "input and arrival seed");
ABSL_FLAG(std::string, input, "",
          "replay captured hidden states: safetensors file whose "
          "--input-tensor [N, H] every request draws its rows from afresh");
ABSL_FLAG(std::string, input_tensor, "x", "--input: name of the tensor");
ABSL_FLAG(std::string, caller_routing, "none",
          "none; routing: every request sends a random routing of the "
          "layer's top_k; logits: random gate logits");
ABSL_FLAG(double, vision_fraction, 0.25,
          "a model with vision experts (ERNIE-4.5-VL): the share of rows "
          "sent as image tokens (token_types 1), the rest text");
ABSL_FLAG(bool, no_retry, false,
          "do not retry requests that fail with UNAVAILABLE (the client "
          "library retries up to 4 attempts by default): every failure "
          "counts, for raw failure rates");

namespace moe::loadtest {
namespace {

int Usage(const std::string& msg) {
  std::fprintf(stderr, "moe-loadtest: %s\n", msg.c_str());
  return kExitUsage;
}

// Prints a live line on stderr until stopped: redrawn in place on a
// terminal, one line per period into a pipe.
class ProgressLine {
 public:
  // Rates count from the end of `warmup`, when measuring starts.
  ProgressLine(Progress* p, absl::Duration period, absl::Duration warmup,
               std::string label)
      : p_(p), label_(std::move(label)), tty_(isatty(STDERR_FILENO)) {
    thread_ = std::thread([this, period, warmup] {
      const auto start = std::chrono::steady_clock::now();
      const double warm = absl::ToDoubleSeconds(warmup);
      auto print = [&] {
        const double t = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
        const char* pre = tty_ ? "\r\033[K" : "";
        const char* post = tty_ ? "" : "\n";
        if (t < warm) {
          std::fprintf(stderr, "%s[%s %6.1fs] warming up%s", pre,
                       label_.c_str(), t, post);
        } else {
          const double m = std::max(t - warm, 1e-9);
          std::fprintf(stderr,
                       "%s[%s %6.1fs] %ld done, %.1f req/s, %.1f tokens/s, "
                       "%ld errors%s",
                       pre, label_.c_str(), t,
                       static_cast<long>(p_->done.load()), p_->done.load() / m,
                       p_->tokens.load() / m,
                       static_cast<long>(p_->errors.load()), post);
        }
        std::fflush(stderr);
      };
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(period),
                           [&] { return stop_; })) {
        print();
      }
      // Into a pipe, a run shorter than one period still leaves its line.
      if (!tty_) print();
      if (tty_) std::fprintf(stderr, "\r\033[K");
    });
  }
  ~ProgressLine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  Progress* p_;
  std::string label_;
  bool tty_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The run as the flags describe it, before asking the server; usage
// errors as INVALID_ARGUMENT.
absl::StatusOr<RunSpec> SpecFromFlags() {
  RunSpec spec;
  MOE_ASSIGN_OR_RETURN(spec.tokens,
                       TokenDistribution::Parse(absl::GetFlag(FLAGS_tokens)));
  spec.rps = absl::GetFlag(FLAGS_rps);
  spec.poisson = absl::GetFlag(FLAGS_arrival) == "poisson";
  if (!spec.poisson && absl::GetFlag(FLAGS_arrival) != "constant") {
    return absl::InvalidArgumentError("--arrival must be constant or poisson");
  }
  spec.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  spec.requests = absl::GetFlag(FLAGS_requests);
  spec.duration = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_duration));
  spec.warmup = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_warmup));
  spec.timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  spec.stream = absl::GetFlag(FLAGS_stream);
  spec.server_timing = absl::GetFlag(FLAGS_server_timing);
  spec.seed = absl::GetFlag(FLAGS_seed);
  spec.digest = absl::GetFlag(FLAGS_digest);
  const std::string from = absl::GetFlag(FLAGS_latency_from);
  if (from != "scheduled" && from != "sent") {
    return absl::InvalidArgumentError(
        "--latency-from must be scheduled or sent");
  }
  spec.latency_from_scheduled = from == "scheduled";
  const double late_ms = absl::GetFlag(FLAGS_late_after_ms);
  if (!(late_ms >= 0)) {
    return absl::InvalidArgumentError("--late-after-ms must be >= 0");
  }
  spec.late_after = std::chrono::microseconds(std::llround(late_ms * 1000));
  MOE_ASSIGN_OR_RETURN(spec.caller_routing,
                       ParseCallerRouting(absl::GetFlag(FLAGS_caller_routing)));
  const std::string dt = absl::GetFlag(FLAGS_dtype);
  spec.dtype = dt == "f32"    ? moe::v1::F32
               : dt == "bf16" ? moe::v1::BF16
               : dt == "f16"  ? moe::v1::F16
                              : moe::v1::DTYPE_UNSPECIFIED;
  const std::string format = absl::GetFlag(FLAGS_format);
  if (spec.dtype == moe::v1::DTYPE_UNSPECIFIED)
    return absl::InvalidArgumentError("--dtype must be f32, bf16 or f16");
  if (format != "text" && format != "json" && format != "csv") {
    return absl::InvalidArgumentError("--format must be text, json or csv");
  }
  if (spec.rps < 0 || spec.max_outstanding < 1 || spec.requests < 0 ||
      spec.duration.count() <= 0 || absl::GetFlag(FLAGS_concurrency) < 1) {
    return absl::InvalidArgumentError(
        "need --rps >= 0, --max-outstanding >= 1, --requests >= 0, "
        "--duration > 0, --concurrency >= 1");
  }
  if (spec.stream && spec.rps > 0)
    return absl::InvalidArgumentError("--stream is a closed-loop mode");
  return spec;
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags() {
  auto o = MakeClientOptions(
      absl::GetFlag(FLAGS_target), absl::GetFlag(FLAGS_tls_ca),
      absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_server_name),
      absl::GetFlag(FLAGS_auth_token_file));
  if (o.ok()) o->retry = !absl::GetFlag(FLAGS_no_retry);
  return o;
}

// --caller-routing against the model: logits cannot route a hash layer
// (it chooses by token id), so the run would only count refusals.
absl::Status CheckCallerRouting(const moe::v1::ModelInfo& info,
                                const RunSpec& spec) {
  // A layer with vision experts takes caller routing only when every row
  // is text, which --vision-fraction=0 makes so.
  if (spec.caller_routing != CallerRouting::kNone && spec.vision_fraction > 0) {
    for (int32_t l : spec.layers) {
      if (info.vision_layers().count(l) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--caller-routing: layer ", l,
            " has vision experts, which route image rows by their own gate; "
            "use --vision-fraction=0 (every row text)"));
      }
    }
  }
  if (spec.caller_routing != CallerRouting::kLogits) return absl::OkStatus();
  for (int32_t l : spec.layers) {
    for (int32_t h : info.hash_layers()) {
      if (l == h) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--caller-routing=logits: layer ", l,
            " is hash-routed (it routes by token id); use routing"));
      }
    }
  }
  return absl::OkStatus();
}

// The server's hidden size and the --layer list ('all': every MoE layer).
absl::Status ApplyModelInfo(const moe::v1::ModelInfo& info, RunSpec* spec) {
  spec->hidden = info.hidden();
  spec->hash_vocab = info.hash_vocab();
  if (!info.vision_layers().empty()) {
    const double f = absl::GetFlag(FLAGS_vision_fraction);
    if (!(f >= 0.0 && f <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--vision-fraction: ", f, " is not a share in [0, 1]"));
    }
    spec->vision_fraction = f;
  }
  spec->top_k = info.top_k();
  spec->experts = info.experts();
  if (const std::string input = absl::GetFlag(FLAGS_input); !input.empty()) {
    auto m = ReadMatrix(input, absl::GetFlag(FLAGS_input_tensor));
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat("--input: ", m.status().message()));
    }
    if (m->cols != info.hidden() || m->rows < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input: ", input, " holds [", m->rows, ", ", m->cols,
          "], the service wants rows of hidden size ", info.hidden()));
    }
    spec->rows = std::make_shared<const std::vector<float>>(std::move(m->data));
  }
  const std::string layer = absl::GetFlag(FLAGS_layer);
  if (layer == "all") {
    spec->layers.assign(info.moe_layers().begin(), info.moe_layers().end());
  } else {
    for (absl::string_view part : absl::StrSplit(layer, ',')) {
      int32_t l;
      if (!absl::SimpleAtoi(part, &l))
        return absl::InvalidArgumentError("--layer: a number, a list or 'all'");
      spec->layers.push_back(l);
    }
  }
  return CheckCallerRouting(info, *spec);
}

// --concurrency, or each level of --concurrency-range.
absl::StatusOr<std::vector<int>> ConcurrencyLevels(const RunSpec& spec) {
  if (absl::GetFlag(FLAGS_concurrency_range).empty()) {
    return std::vector<int>{absl::GetFlag(FLAGS_concurrency)};
  }
  if (spec.rps > 0)
    return absl::InvalidArgumentError(
        "--concurrency-range is a closed-loop sweep");
  return ParseRange(absl::GetFlag(FLAGS_concurrency_range));
}

// One run per level, each with its progress line.
std::vector<Summary> RunAll(MoeClient& client, RunSpec spec,
                            const std::vector<int>& levels) {
  std::vector<Summary> summaries;
  for (int c : levels) {
    spec.concurrency = c;
    Progress progress;
    RunResult run;
    {
      ProgressLine line(&progress, absl::GetFlag(FLAGS_progress_interval),
                        absl::GetFlag(FLAGS_warmup),
                        spec.rps > 0 ? absl::StrCat(spec.rps, " rps")
                                     : absl::StrCat("c=", c));
      run = Run(client, spec, &progress);
    }
    summaries.push_back(Summarize(run, spec));
  }
  return summaries;
}

void PrintReport(const std::vector<Summary>& summaries, const RunSpec& spec,
                 const std::string& target) {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "json") {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& s : summaries) runs.push_back(ToJson(s));
    nlohmann::json out =
        summaries.size() == 1 ? runs[0] : nlohmann::json{{"runs", runs}};
    out["target"] = target;
    out["tokens"] = spec.tokens.text();
    std::printf("%s\n", out.dump(2).c_str());
  } else if (format == "csv") {
    std::printf("%s\n", CsvHeader().c_str());
    for (const auto& s : summaries) std::printf("%s\n", CsvRow(s).c_str());
  } else {
    for (const auto& s : summaries) {
      const std::string input = absl::GetFlag(FLAGS_input);
      std::printf(
          "target %s, tokens per request %s, layers %s, rows drawn afresh "
          "for each request from %s\n",
          target.c_str(), spec.tokens.text().c_str(),
          absl::GetFlag(FLAGS_layer).c_str(),
          input.empty()
              ? "a pool of synthetic ones"
              : absl::StrCat(input, " (", spec.rows->size() / spec.hidden,
                             " rows)")
                    .c_str());
      std::printf("%s\n", FormatText(s).c_str());
    }
  }
}

// 1 when requests failed beyond --max-error-rate, else 2 when p99 is above
// --max-p99-ms, else 0.
int ExitCodeOf(const std::vector<Summary>& summaries) {
  int code = 0;
  for (const auto& s : summaries) {
    if (s.errors > 0 && s.error_rate > absl::GetFlag(FLAGS_max_error_rate))
      code = 1;
    if (code == 0 && absl::GetFlag(FLAGS_max_p99_ms) > 0 &&
        s.p99_ms > absl::GetFlag(FLAGS_max_p99_ms)) {
      code = 2;
    }
  }
  if (code == 1)
    std::fprintf(stderr,
                 "moe-loadtest: requests failed beyond --max-error-rate\n");
  if (code == 2)
    std::fprintf(stderr, "moe-loadtest: p99 latency above --max-p99-ms\n");
  return code;
}

int Main() {
  auto spec = SpecFromFlags();
  if (!spec.ok()) return Usage(std::string(spec.status().message()));
  auto opts = ClientOptionsFromFlags();
  if (!opts.ok()) return Usage(std::string(opts.status().message()));
  MoeClient client(*opts);
  auto info = client.GetModelInfo(std::chrono::seconds(10));
  if (!info.ok()) {
    std::fprintf(stderr, "moe-loadtest: %s: %s\n",
                 absl::StatusCodeToString(info.status().code()).c_str(),
                 std::string(info.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = ApplyModelInfo(*info, &*spec); !s.ok())
    return Usage(std::string(s.message()));
  auto levels = ConcurrencyLevels(*spec);
  if (!levels.ok()) return Usage(std::string(levels.status().message()));
  const std::vector<Summary> summaries = RunAll(client, *spec, *levels);
  PrintReport(summaries, *spec, opts->target);
  return ExitCodeOf(summaries);
}

}  // namespace
}  // namespace moe::loadtest

int main(int argc, char** argv) {
  moe::ParseOnlyFlagsOrExit(
      argc, argv,
      "moe-loadtest --target HOST:PORT [-c N] [-n N | -z 10s] [--rps R "
      "[--arrival poisson] [--latency-from scheduled|sent]] [--tokens "
      "N|A:B|a,b] [--layer L|all] [--stream] "
      "[--concurrency-range a:b:s] [--caller-routing none|routing|logits] "
      "[--input FILE.safetensors] [--seed S] [--digest] "
      "[--format text|json|csv]",
      {{"c", "concurrency"}, {"n", "requests"}, {"z", "duration"}});
  return moe::loadtest::Main();
}
