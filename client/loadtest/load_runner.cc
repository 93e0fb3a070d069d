#include "client/loadtest/load_runner.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/loadtest/request_source.h"

namespace moe::loadtest {
namespace {

using Clock = std::chrono::steady_clock;

// Warm-up requests take their indices from here on, so that the measured
// ones are 0, 1, 2, ... whatever the warm-up sent.
constexpr uint64_t kWarmupIndex = uint64_t{1} << 63;

class Recorder {
 public:
  Recorder(const RunSpec& spec, Progress* progress,
           Clock::time_point measure_from)
      : spec_(spec), progress_(progress), measure_from_(measure_from) {}

  // Whether another measured request may start (request-count mode).
  bool Claim() {
    if (spec_.requests <= 0) return true;
    return claimed_.fetch_add(1) < spec_.requests;
  }
  bool Measuring(Clock::time_point t) const { return t >= measure_from_; }

  // The next request index: 0, 1, ... for measured requests.
  uint64_t NextIndex(bool measuring) {
    return measuring ? measured_.fetch_add(1)
                     : kWarmupIndex + warm_.fetch_add(1);
  }
  void AddDigest(const moe::v1::ForwardRequest& req) {
    if (spec_.digest) digest_.fetch_add(RequestDigest(req));
  }

  // A request scheduled at `scheduled` (its send time in a closed loop),
  // sent at `start`, answered at `end`; counted when it was scheduled
  // after the warm-up.
  void Record(Clock::time_point scheduled, Clock::time_point start,
              Clock::time_point end, int code, const std::string& message,
              int64_t tokens, const moe::v1::StageTiming& timing) {
    if (!Measuring(scheduled)) return;
    Sample s;
    s.latency_ms =
        std::chrono::duration<double, std::milli>(end - start).count();
    s.send_delay_ms =
        std::chrono::duration<double, std::milli>(start - scheduled).count();
    s.code = code;
    s.tokens = tokens;
    s.timing = timing;
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back(s);
    progress_->done.fetch_add(1);
    if (code != 0) {
      progress_->errors.fetch_add(1);
      const std::string m = absl::StrCat(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ": ",
          message);
      if (messages_.size() < 10) messages_.insert(m);
    } else {
      progress_->tokens.fetch_add(tokens);
    }
  }

  void Finish(RunResult* r) {
    std::lock_guard<std::mutex> lock(mu_);
    r->samples = std::move(samples_);
    r->errors.assign(messages_.begin(), messages_.end());
    r->digest = digest_.load();
  }

 private:
  const RunSpec& spec_;
  Progress* progress_;
  Clock::time_point measure_from_;
  std::atomic<int64_t> claimed_{0};
  std::atomic<uint64_t> measured_{0}, warm_{0}, digest_{0};
  std::mutex mu_;
  std::vector<Sample> samples_;
  std::set<std::string> messages_;
};

struct Plan {
  Clock::time_point start, measure_from, end;  // end: duration mode only
};

bool TimeUp(const RunSpec& spec, const Plan& plan) {
  return spec.requests <= 0 && Clock::now() >= plan.end;
}

void UnaryUser(MoeClient& client, const RunSpec& spec, const Plan& plan,
               const RequestSource& source, Recorder& rec) {
  moe::v1::ForwardRequest req;
  while (!TimeUp(spec, plan)) {
    const bool measuring = rec.Measuring(Clock::now());
    if (measuring && !rec.Claim()) return;
    const int64_t tokens = source.Make(rec.NextIndex(measuring), &req);
    if (measuring) rec.AddDigest(req);
    moe::v1::ForwardResponse resp;
    grpc::ClientContext ctx;
    client.Prepare(&ctx, spec.timeout);
    const auto t0 = Clock::now();
    const grpc::Status s = client.stub()->Forward(&ctx, req, &resp);
    rec.Record(t0, t0, Clock::now(), s.error_code(), s.error_message(), tokens,
               resp.timing());
  }
}

void StreamUser(MoeClient& client, const RunSpec& spec, const Plan& plan,
                const RequestSource& source, Recorder& rec) {
  moe::v1::ForwardRequest req;
  while (!TimeUp(spec, plan)) {
    grpc::ClientContext ctx;
    // The stream lives for the whole run; each request has the run's timeout
    // on top of what is left.
    const auto left =
        spec.requests > 0
            ? std::chrono::hours(1)
            : std::chrono::duration_cast<std::chrono::milliseconds>(
                  plan.end - Clock::now());
    client.Prepare(&ctx,
                   std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                       spec.timeout);
    auto stream = client.stub()->ForwardStream(&ctx);
    bool broken = false;
    while (!TimeUp(spec, plan)) {
      const bool measuring = rec.Measuring(Clock::now());
      if (measuring && !rec.Claim()) {
        stream->WritesDone();
        stream->Finish();
        return;
      }
      const int64_t tokens = source.Make(rec.NextIndex(measuring), &req);
      if (measuring) rec.AddDigest(req);
      moe::v1::ForwardResponse resp;
      const auto t0 = Clock::now();
      if (!stream->Write(req) || !stream->Read(&resp)) {
        broken = true;
        break;
      }
      rec.Record(t0, t0, Clock::now(), resp.error_code(), resp.error_message(),
                 tokens, resp.timing());
    }
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    if (broken) {
      const auto now = Clock::now();
      rec.Record(now, now, now, s.ok() ? grpc::UNKNOWN : s.error_code(),
                 s.ok() ? "stream broke" : s.error_message(), 0, {});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

// The open loop's schedule: send times at a constant rate or with
// exponential gaps, from the run's start.
class Schedule {
 public:
  Schedule(const RunSpec& spec, Clock::time_point start)
      : spec_(spec),
        rng_(spec.seed ^ 0xa5a5a5a5a5a5a5a5ull),
        gap_(spec.rps),
        next_(start) {}
  Clock::time_point Next() {
    const Clock::time_point at = next_;
    const double step = spec_.poisson ? gap_(rng_) : 1.0 / spec_.rps;
    next_ += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(step));
    return at;
  }
  Clock::time_point Peek() const { return next_; }

 private:
  const RunSpec& spec_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  Clock::time_point next_;
};

// Sends every scheduled request at its time, or as soon after as the
// in-flight cap allows. In duration mode the schedule ends at the run's end:
// the sends scheduled before it that could not go out by then are counted
// as never sent, so that scheduled == sent + never_sent.
void OpenLoop(MoeClient& client, const RunSpec& spec, const Plan& plan,
              const RequestSource& source, Recorder& rec, RunResult* result) {
  struct Call {
    grpc::ClientContext ctx;
    moe::v1::ForwardRequest req;
    moe::v1::ForwardResponse resp;
    Clock::time_point scheduled, start;
    int64_t tokens = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  Schedule schedule(spec, plan.start);
  const bool by_time = spec.requests <= 0;
  // Measured sends scheduled before the end that will not go out.
  auto never_sent = [&](Clock::time_point at) {
    for (; at < plan.end; at = schedule.Next()) {
      if (rec.Measuring(at)) {
        ++result->scheduled;
        ++result->never_sent;
      }
    }
  };
  Clock::time_point last_send = plan.measure_from;
  while (true) {
    const Clock::time_point at = schedule.Next();
    if (by_time && at >= plan.end) break;
    const bool measuring = rec.Measuring(at);
    if (measuring && !rec.Claim()) break;
    std::this_thread::sleep_until(at);
    if (by_time && Clock::now() >= plan.end) {
      never_sent(at);
      break;
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      auto free = [&] { return outstanding < spec.max_outstanding; };
      if (!free()) {
        if (measuring) ++result->held_by_cap;
        if (!by_time) {
          cv.wait(lock, free);
        } else if (!cv.wait_until(lock, plan.end, free)) {
          lock.unlock();
          never_sent(at);
          break;
        }
      }
      ++outstanding;
    }
    auto* call = new Call();
    call->tokens = source.Make(rec.NextIndex(measuring), &call->req);
    if (measuring) rec.AddDigest(call->req);
    client.Prepare(&call->ctx, spec.timeout);
    call->scheduled = at;
    call->start = Clock::now();
    if (measuring) {
      ++result->scheduled;
      ++result->sent;
      if (call->start - at > spec.late_after) ++result->late;
      last_send = call->start;
    }
    client.stub()->async()->Forward(
        &call->ctx, &call->req, &call->resp,
        [call, &rec, &mu, &cv, &outstanding](grpc::Status s) {
          rec.Record(call->scheduled, call->start, Clock::now(), s.error_code(),
                     s.error_message(), call->tokens, call->resp.timing());
          delete call;
          std::lock_guard<std::mutex> lock(mu);
          --outstanding;
          cv.notify_all();
        });
  }
  // Sends went out over the measured schedule: to its end by time, to the
  // last send by count.
  result->send_seconds =
      std::chrono::duration<double>(
          (by_time ? std::max(plan.end, last_send) : last_send) -
          plan.measure_from)
          .count();
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return outstanding == 0; });
}

}  // namespace

RunResult Run(MoeClient& client, const RunSpec& spec, Progress* progress) {
  Plan plan;
  plan.start = Clock::now();
  plan.measure_from = plan.start + spec.warmup;
  plan.end = plan.measure_from + spec.duration;
  const RequestSource source(spec);
  // The pool is encoded before the clock starts.
  plan.start = Clock::now();
  plan.measure_from = plan.start + spec.warmup;
  plan.end = plan.measure_from + spec.duration;
  Recorder rec(spec, progress, plan.measure_from);
  RunResult result;
  if (spec.rps > 0) {
    OpenLoop(client, spec, plan, source, rec, &result);
  } else {
    std::vector<std::thread> users;
    for (int u = 0; u < spec.concurrency; ++u) {
      users.emplace_back([&] {
        if (spec.stream) {
          StreamUser(client, spec, plan, source, rec);
        } else {
          UnaryUser(client, spec, plan, source, rec);
        }
      });
    }
    for (auto& t : users) t.join();
  }
  result.seconds = std::chrono::duration<double>(
                       Clock::now() - std::max(plan.measure_from, plan.start))
                       .count();
  rec.Finish(&result);
  return result;
}

}  // namespace moe::loadtest
