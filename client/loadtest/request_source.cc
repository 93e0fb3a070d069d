#include "client/loadtest/request_source.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "client/loadtest/load_runner.h"
#include "core/synthetic_model.h"
#include "proto/tensor_codec.h"

namespace moe::loadtest {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// SplitMix64 as a uniform random bit generator: one request's draws, from
// a state that costs one word to seed (a Mersenne Twister per request
// would cost 2.5 KiB of state and its seeding).
class RequestRng {
 public:
  using result_type = uint64_t;
  explicit RequestRng(uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~uint64_t{0}; }
  result_type operator()() { return Mix64(state_ += 0x9e3779b97f4a7c15ull); }

 private:
  uint64_t state_;
};

// A random valid routing (every row `top_k` distinct experts, positive
// weights summing to 1) or random gate logits, per --caller-routing.
void AddCallerRouting(const RunSpec& spec, int64_t tokens, RequestRng& rng,
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

}  // namespace

RequestSource::RequestSource(const RunSpec& spec) : spec_(spec) {
  const int64_t h = std::max<int64_t>(spec.hidden, 1);
  std::vector<float> synthetic;
  const float* rows = nullptr;
  if (spec.rows != nullptr && !spec.rows->empty()) {
    rows_ = static_cast<int64_t>(spec.rows->size()) / h;
    rows = spec.rows->data();
  } else {
    rows_ = std::clamp<int64_t>(kMaxPoolBytes / (h * 4), 1, kSyntheticRows);
    synthetic.resize(rows_ * h);
    FillSyntheticInput(spec.seed, rows_ * h, synthetic.data());
    rows = synthetic.data();
  }
  moe::v1::Tensor encoded;
  EncodeMatrix(rows, rows_, h, spec.dtype, &encoded);
  pool_ = std::move(*encoded.mutable_data());
  row_bytes_ = pool_.size() / rows_;
}

int64_t RequestSource::Make(uint64_t index,
                            moe::v1::ForwardRequest* req) const {
  RequestRng rng(Mix64(spec_.seed * 0x9e3779b97f4a7c15ull ^ Mix64(index)));
  req->Clear();
  const int64_t tokens = spec_.tokens.Sample(rng);
  req->set_layer(spec_.layers[index % spec_.layers.size()]);
  moe::v1::Tensor* x = req->mutable_hidden_states();
  x->set_dtype(spec_.dtype);
  x->add_shape(tokens);
  x->add_shape(spec_.hidden);
  std::string* bytes = x->mutable_data();
  bytes->resize(static_cast<size_t>(tokens) * row_bytes_);
  // Fresh rows for every request, drawn with replacement.
  std::uniform_int_distribution<int64_t> pick(0, rows_ - 1);
  for (int64_t i = 0; i < tokens; ++i) {
    std::memcpy(bytes->data() + i * row_bytes_,
                pool_.data() + pick(rng) * row_bytes_, row_bytes_);
  }
  if (spec_.hash_vocab > 0) {
    std::uniform_int_distribution<int64_t> id(0, spec_.hash_vocab - 1);
    for (int64_t i = 0; i < tokens; ++i) req->add_token_ids(id(rng));
  }
  if (spec_.vision_fraction >= 0) {
    std::bernoulli_distribution image(spec_.vision_fraction);
    for (int64_t i = 0; i < tokens; ++i) req->add_token_types(image(rng));
  }
  if (spec_.caller_routing != CallerRouting::kNone) {
    AddCallerRouting(spec_, tokens, rng, req);
  }
  req->set_return_timing(spec_.server_timing);
  return tokens;
}

uint64_t RequestDigest(const moe::v1::ForwardRequest& req) {
  std::string bytes;
  req.SerializeToString(&bytes);
  uint64_t h = Mix64(bytes.size());
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = Mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return Mix64(h ^ tail);
}

}  // namespace moe::loadtest
