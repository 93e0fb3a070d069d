#include "client/loadtest/load_runner.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/synthetic_model.h"
#include "proto/tensor_codec.h"

namespace moe::loadtest {
namespace {

using Clock = std::chrono::steady_clock;

// One encoded input per token count, made on first use: synthetic, or n
// rows drawn from the captured ones.
class InputCache {
 public:
  InputCache(int64_t hidden, moe::v1::DType dtype, uint64_t seed,
             std::shared_ptr<const std::vector<float>> rows)
      : hidden_(hidden), dtype_(dtype), seed_(seed), rows_(std::move(rows)) {}
  std::shared_ptr<const moe::v1::Tensor> Get(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& t = cache_[n];
    if (!t) {
      std::vector<float> x(n * hidden_);
      if (rows_ != nullptr && !rows_->empty()) {
        const int64_t have = static_cast<int64_t>(rows_->size()) / hidden_;
        std::mt19937_64 rng(seed_ + n);
        std::uniform_int_distribution<int64_t> pick(0, have - 1);
        for (int64_t i = 0; i < n; ++i) {
          const float* src = rows_->data() + pick(rng) * hidden_;
          std::copy(src, src + hidden_, x.data() + i * hidden_);
        }
      } else {
        FillSyntheticInput(seed_ + n, n * hidden_, x.data());
      }
      auto tensor = std::make_shared<moe::v1::Tensor>();
      EncodeMatrix(x.data(), n, hidden_, dtype_, tensor.get());
      t = tensor;
    }
    return t;
  }

 private:
  int64_t hidden_;
  moe::v1::DType dtype_;
  uint64_t seed_;
  std::shared_ptr<const std::vector<float>> rows_;
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<const moe::v1::Tensor>> cache_;
};

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

  void Record(Clock::time_point start, Clock::time_point end, int code,
              const std::string& message, int64_t tokens,
              const moe::v1::StageTiming& timing) {
    if (!Measuring(start)) return;
    Sample s;
    s.latency_ms =
        std::chrono::duration<double, std::milli>(end - start).count();
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
  }

 private:
  const RunSpec& spec_;
  Progress* progress_;
  Clock::time_point measure_from_;
  std::atomic<int64_t> claimed_{0};
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

// A random valid routing (every row `top_k` distinct experts, positive
// weights summing to 1) or random gate logits, per --caller-routing.
void AddCallerRouting(const RunSpec& spec, int64_t tokens, std::mt19937_64& rng,
                      moe::v1::ForwardRequest* req) {
  if (spec.caller_routing == CallerRouting::kLogits) {
    std::normal_distribution<float> logit(0.0f, 1.0f);
    std::vector<float> logits(tokens * spec.experts);
    for (float& v : logits) v = logit(rng);
    EncodeMatrix(logits.data(), tokens, spec.experts, moe::v1::F32,
                 req->mutable_router_logits());
    return;
  }
  moe::v1::Routing* r = req->mutable_routing();
  r->set_tokens(tokens);
  r->set_slots(static_cast<int32_t>(spec.top_k));
  std::vector<int32_t> ids(spec.experts);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  std::vector<float> w(spec.top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    // The first top_k of a partial shuffle: distinct ids.
    for (int64_t e = 0; e < spec.experts; ++e) ids[e] = static_cast<int32_t>(e);
    float sum = 0;
    for (int64_t s = 0; s < spec.top_k; ++s) {
      std::uniform_int_distribution<int64_t> pick(s, spec.experts - 1);
      std::swap(ids[s], ids[pick(rng)]);
      sum += w[s] = weight(rng);
    }
    for (int64_t s = 0; s < spec.top_k; ++s) {
      r->add_expert_ids(ids[s]);
      r->add_weights(w[s] / sum);
    }
  }
}

moe::v1::ForwardRequest MakeRequest(const RunSpec& spec, InputCache& inputs,
                                    std::mt19937_64& rng, int64_t* tokens,
                                    uint64_t index) {
  moe::v1::ForwardRequest req;
  *tokens = spec.tokens.Sample(rng);
  req.set_layer(spec.layers[index % spec.layers.size()]);
  *req.mutable_hidden_states() = *inputs.Get(*tokens);
  if (spec.hash_vocab > 0) {
    std::uniform_int_distribution<int64_t> id(0, spec.hash_vocab - 1);
    for (int64_t i = 0; i < *tokens; ++i) req.add_token_ids(id(rng));
  }
  if (spec.caller_routing != CallerRouting::kNone) {
    AddCallerRouting(spec, *tokens, rng, &req);
  }
  req.set_return_timing(spec.server_timing);
  return req;
}

void UnaryUser(MoeClient& client, const RunSpec& spec, const Plan& plan,
               InputCache& inputs, Recorder& rec, int user,
               std::atomic<uint64_t>& index) {
  std::mt19937_64 rng(spec.seed * 7919 + user);
  while (!TimeUp(spec, plan)) {
    const bool measuring = rec.Measuring(Clock::now());
    if (measuring && !rec.Claim()) return;
    int64_t tokens;
    auto req = MakeRequest(spec, inputs, rng, &tokens, index.fetch_add(1));
    moe::v1::ForwardResponse resp;
    grpc::ClientContext ctx;
    client.Prepare(&ctx, spec.timeout);
    const auto t0 = Clock::now();
    const grpc::Status s = client.stub()->Forward(&ctx, req, &resp);
    rec.Record(t0, Clock::now(), s.error_code(), s.error_message(), tokens,
               resp.timing());
  }
}

void StreamUser(MoeClient& client, const RunSpec& spec, const Plan& plan,
                InputCache& inputs, Recorder& rec, int user,
                std::atomic<uint64_t>& index) {
  std::mt19937_64 rng(spec.seed * 7919 + user);
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
      int64_t tokens;
      auto req = MakeRequest(spec, inputs, rng, &tokens, index.fetch_add(1));
      moe::v1::ForwardResponse resp;
      const auto t0 = Clock::now();
      if (!stream->Write(req) || !stream->Read(&resp)) {
        broken = true;
        break;
      }
      rec.Record(t0, Clock::now(), resp.error_code(), resp.error_message(),
                 tokens, resp.timing());
    }
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    if (broken) {
      rec.Record(Clock::now(), Clock::now(),
                 s.ok() ? grpc::UNKNOWN : s.error_code(),
                 s.ok() ? "stream broke" : s.error_message(), 0, {});
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

void OpenLoop(MoeClient& client, const RunSpec& spec, const Plan& plan,
              InputCache& inputs, Recorder& rec, RunResult* result) {
  struct Call {
    grpc::ClientContext ctx;
    moe::v1::ForwardRequest req;
    moe::v1::ForwardResponse resp;
    Clock::time_point start;
    int64_t tokens = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  std::mt19937_64 rng(spec.seed);
  std::exponential_distribution<double> gap(spec.rps);
  Clock::time_point next = plan.start;
  uint64_t index = 0;
  while (!TimeUp(spec, plan)) {
    std::this_thread::sleep_until(next);
    const double step = spec.poisson ? gap(rng) : 1.0 / spec.rps;
    next += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(step));
    if (rec.Measuring(Clock::now()) && !rec.Claim()) break;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (outstanding >= spec.max_outstanding) {
        ++result->late_starts;
        cv.wait(lock, [&] { return outstanding < spec.max_outstanding; });
      }
      ++outstanding;
    }
    auto* call = new Call();
    call->req = MakeRequest(spec, inputs, rng, &call->tokens, index++);
    client.Prepare(&call->ctx, spec.timeout);
    call->start = Clock::now();
    client.stub()->async()->Forward(
        &call->ctx, &call->req, &call->resp,
        [call, &rec, &mu, &cv, &outstanding](grpc::Status s) {
          rec.Record(call->start, Clock::now(), s.error_code(),
                     s.error_message(), call->tokens, call->resp.timing());
          delete call;
          std::lock_guard<std::mutex> lock(mu);
          --outstanding;
          cv.notify_all();
        });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return outstanding == 0; });
}

}  // namespace

RunResult Run(MoeClient& client, const RunSpec& spec, Progress* progress) {
  Plan plan;
  plan.start = Clock::now();
  plan.measure_from = plan.start + spec.warmup;
  plan.end = plan.measure_from + spec.duration;
  InputCache inputs(spec.hidden, spec.dtype, spec.seed, spec.rows);
  Recorder rec(spec, progress, plan.measure_from);
  RunResult result;
  if (spec.rps > 0) {
    OpenLoop(client, spec, plan, inputs, rec, &result);
  } else {
    std::atomic<uint64_t> index{0};
    std::vector<std::thread> users;
    for (int u = 0; u < spec.concurrency; ++u) {
      users.emplace_back([&, u] {
        if (spec.stream) {
          StreamUser(client, spec, plan, inputs, rec, u, index);
        } else {
          UnaryUser(client, spec, plan, inputs, rec, u, index);
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
