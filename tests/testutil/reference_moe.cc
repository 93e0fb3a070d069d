#include "tests/testutil/reference_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace moe::testing {
namespace {

using Vec = std::vector<double>;

double Silu(double v) { return v / (1.0 + std::exp(-v)); }

// The activation `act` with limit L (tests/golden/README.md): silu,
// gptoss, silu_clamp, relu2 (non-gated: u only), gelu_tanh, situ, gelu_erf
// and swiglustep (silu's output capped at L).
double Act(const MoeLayerConfig& k, Activation act, double L, double g,
           double u) {
  if (act == Activation::kSilu) return Silu(g) * u;
  if (act == Activation::kRelu2) return u > 0 ? u * u : 0.0;
  if (act == Activation::kGeluTanh) {
    const double pi = 3.14159265358979323846;
    return 0.5 * g *
           (1 + std::tanh(std::sqrt(2 / pi) * (g + 0.044715 * g * g * g))) * u;
  }
  if (act == Activation::kSitu) {
    const double b = k.act_beta, l = k.act_linear_beta;
    const double up = l > 0 ? l * std::tanh(u / l) : u;
    return b * std::tanh(g / b) / (1 + std::exp(-g)) * up;
  }
  if (act == Activation::kGeluErf) {
    return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0))) * u;
  }
  if (act == Activation::kSwigluStep) {
    return std::min(Silu(g), L) * std::min(std::max(u, -L), L);
  }
  g = std::min(g, L);
  u = std::min(std::max(u, -L), L);
  if (act == Activation::kGptOss) {
    return (u + 1) * g / (1 + std::exp(-double(k.act_alpha) * g));
  }
  return Silu(g) * u;
}

// v * (mean(v^2) + eps)^-0.5 * w (w empty: 1).
Vec RmsNorm(const Vec& v, double eps, const std::vector<float>& w) {
  double ss = 0;
  for (double a : v) ss += a * a;
  const double inv = 1 / std::sqrt(ss / double(v.size()) + eps);
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = v[i] * inv * (w.empty() ? 1.0 : double(w[i]));
  }
  return out;
}

// out [rows] = W v (+ b) for a row-major [rows, v.size()] weight.
Vec Linear(const std::vector<float>& w, const std::vector<float>& b,
           int64_t rows, const Vec& v) {
  const int64_t cols = static_cast<int64_t>(v.size());
  Vec out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double d = b.empty() ? 0.0 : double(b[r]);
    for (int64_t j = 0; j < cols; ++j) d += double(w[r * cols + j]) * v[j];
    out[r] = d;
  }
  return out;
}

// W2 act(W1 v + b1, W3 v + b3) + b2 for [I, W] / [W, I] weights at the
// given offsets, W = v.size() (no W1 for a non-gated layer); `expert` >= 0
// picks the routed expert's biases when the layer has them, and -1 (the
// shared expert) its own activation and limit (shared_act).
Vec Expert(const GoldenCase& c, const std::vector<float>& w1,
           const std::vector<float>& w3, const std::vector<float>& w2,
           int64_t off, int64_t inter, const Vec& v, int64_t expert = -1) {
  const int64_t H = static_cast<int64_t>(v.size());
  const bool bias = expert >= 0 && c.config.expert_bias;
  const bool gated = c.config.gated;
  Vec h(inter), out(H, 0.0);
  for (int64_t i = 0; i < inter; ++i) {
    double g = bias ? c.b1[expert * inter + i] : 0.0;
    double u = bias ? c.b3[expert * inter + i] : 0.0;
    for (int64_t j = 0; j < H; ++j) {
      if (gated) g += w1[off + i * H + j] * v[j];
      u += w3[off + i * H + j] * v[j];
    }
    h[i] = expert >= 0 ? Act(c.config, c.config.act, c.config.act_limit, g, u)
                       : Act(c.config, c.config.shared_activation(),
                             c.config.shared_limit(), g, u);
  }
  for (int64_t j = 0; j < H; ++j) {
    if (bias) out[j] = c.b2[expert * H + j];
    for (int64_t i = 0; i < inter; ++i)
      out[j] += w2[off + j * inter + i] * h[i];
  }
  return out;
}

}  // namespace

std::vector<double> ReferenceGateLogits(const GoldenCase& c) {
  const MoeLayerConfig& k = c.config;
  // The router's rows: the experts' and the zero experts'.
  const int64_t n = c.tokens, E = k.router_rows(), H = k.hidden;
  std::vector<double> logits(n * E);
  for (int64_t t = 0; t < n; ++t) {
    Vec xr(c.x.begin() + t * H, c.x.begin() + (t + 1) * H);
    if (k.router_prenorm) {
      xr = RmsNorm(xr, k.norm_eps, c.gate_scale);
      for (double& v : xr) v /= std::sqrt(double(H));
    }
    for (int64_t e = 0; e < E; ++e) {
      double d = 0;
      for (int64_t j = 0; j < H; ++j) d += double(c.gate[e * H + j]) * xr[j];
      logits[t * E + e] = d + (k.router_bias ? c.router_bias[e] : 0.0f);
    }
  }
  return logits;
}

void RunReferenceMoe(GoldenCase& c) {
  const MoeLayerConfig& k = c.config;
  // E here is the router's rows (zero experts included); ids >= num_experts
  // are zero experts, which add w * x.
  const int64_t n = c.tokens, E = k.router_rows(), H = k.hidden, K = k.top_k;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Vec> logits(n, Vec(E)), scores(n, Vec(E));
  const std::vector<double> gate_out = ReferenceGateLogits(c);
  for (int64_t t = 0; t < n; ++t) {
    logits[t].assign(gate_out.begin() + t * E, gate_out.begin() + (t + 1) * E);
    if (k.router_softcap > 0) {  // c * tanh(l / c), before score_func
      for (double& l : logits[t]) {
        l = k.router_softcap * std::tanh(l / k.router_softcap);
      }
    }
    if (k.score_func == ScoreFunc::kTopkSoftmax ||
        k.score_func == ScoreFunc::kSparsemixer) {
      scores[t] = logits[t];  // chosen on the logits; softmax over the k later
    } else if (k.score_func == ScoreFunc::kSqrtSoftplus) {
      for (int64_t e = 0; e < E; ++e)
        scores[t][e] = std::sqrt(std::log1p(std::exp(logits[t][e])));
    } else if (k.score_func == ScoreFunc::kSigmoid) {
      for (int64_t e = 0; e < E; ++e)
        scores[t][e] = 1 / (1 + std::exp(-logits[t][e]));
    } else {
      const double m = *std::max_element(logits[t].begin(), logits[t].end());
      double sum = 0;
      for (int64_t e = 0; e < E; ++e)
        sum += scores[t][e] = std::exp(logits[t][e] - m);
      for (double& s : scores[t]) s /= sum;
    }
  }
  // (token, expert, weight) contributions, per token in summation order.
  std::vector<std::vector<std::pair<int64_t, double>>> slots(n);
  if (k.routing == RoutingMode::kExpertChoice) {
    const int64_t C = ExpertChoiceCapacity(k, n);
    c.top_shape = {E, C};
    c.top_idx.assign(E * C, 0);
    c.top_w.assign(E * C, 0);
    for (int64_t e = 0; e < E && n > 0; ++e) {
      const double m = [&] {
        double v = -inf;
        for (int64_t t = 0; t < n; ++t) v = std::max(v, logits[t][e]);
        return v;
      }();
      Vec p(n);
      double sum = 0;
      for (int64_t t = 0; t < n; ++t) sum += p[t] = std::exp(logits[t][e] - m);
      for (double& v : p) v /= sum;
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      for (int64_t j = 0; j < C; ++j) {
        c.top_idx[e * C + j] = order[j];
        c.top_w[e * C + j] = static_cast<float>(p[order[j]]);
        slots[order[j]].push_back({e, p[order[j]]});
      }
    }
    for (auto& s : slots) {
      double sum = 0;
      for (auto& [e, w] : s) sum += w;
      for (auto& [e, w] : s) w = w / (sum + 1e-9) * k.route_scale;
    }
  } else {
    c.top_shape = {n, K};
    c.top_idx.assign(n * K, 0);
    c.top_w.assign(n * K, 0);
    std::vector<int64_t> load(E, 0);
    const int64_t cap = k.capacity_factor > 0 ? TokenChoiceCapacity(k, n) : -1;
    for (int64_t t = 0; t < n; ++t) {
      Vec ch(E);
      for (int64_t e = 0; e < E; ++e)
        ch[e] = scores[t][e] + (k.use_bias ? c.bias[e] : 0.0f);
      if (k.n_groups > 0) {
        const int64_t gs = E / k.n_groups;
        Vec gscore(k.n_groups);
        for (int64_t g = 0; g < k.n_groups; ++g) {
          Vec v(ch.begin() + g * gs, ch.begin() + (g + 1) * gs);
          std::sort(v.rbegin(), v.rend());
          gscore[g] = k.group_score == GroupScore::kMax ? v[0] : v[0] + v[1];
        }
        std::vector<int64_t> gorder(k.n_groups);
        std::iota(gorder.begin(), gorder.end(), 0);
        std::stable_sort(
            gorder.begin(), gorder.end(),
            [&](int64_t a, int64_t b) { return gscore[a] > gscore[b]; });
        std::vector<bool> keep(k.n_groups, false);
        for (int64_t j = 0; j < k.topk_groups; ++j) keep[gorder[j]] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!keep[e / gs]) ch[e] = -inf;
      }
      std::vector<int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return ch[a] > ch[b]; });
      if (k.hash_routed()) {
        for (int64_t j = 0; j < K; ++j) {
          order[j] = c.tid2eid[c.token_ids[t] * K + j];
        }
      }
      Vec chosen(K);
      for (int64_t j = 0; j < K; ++j) chosen[j] = scores[t][order[j]];
      if (k.score_func == ScoreFunc::kSparsemixer) {
        // Two rounds: the best logit left, weighted by its softmax over the
        // logits within 2 * eps of it (relative gap); round 2 also drops
        // round 1's choice. The choice is order[0], order[1] (descending).
        const Vec& l = logits[t];
        for (int64_t r = 0; r < 2; ++r) {
          const double m = l[order[r]];
          double sum = 0;
          for (int64_t e = 0; e < E; ++e) {
            if (r == 1 && e == order[0]) continue;
            const double gap = (m - l[e]) / std::max(std::abs(l[e]), m);
            if (!(gap > 2 * double(k.jitter_eps))) sum += std::exp(l[e] - m);
          }
          chosen[r] = 1 / sum;
        }
      }
      if (k.score_func == ScoreFunc::kTopkSoftmax) {
        const double m = chosen[0];  // the largest: chosen in descending order
        double sum = 0;
        for (double& v : chosen) sum += v = std::exp(v - m);
        for (double& v : chosen) v /= sum;
      }
      for (int64_t j = 0; j < K; ++j) {
        const int64_t e = order[j];
        double w = chosen[j];
        if (cap >= 0) {
          if (load[e] < cap)
            ++load[e];
          else
            w = 0;  // token-major admission
        }
        slots[t].push_back({e, w});
      }
      double sum = 0;
      for (auto& [e, w] : slots[t]) sum += w;
      for (size_t j = 0; j < slots[t].size(); ++j) {
        auto& w = slots[t][j].second;
        if (k.route_norm) {
          w /= k.norm_min > 0 ? std::max(sum, double(k.norm_min)) : sum + 1e-20;
        }
        w *= k.route_scale;
        if (k.per_expert_scale) w *= c.per_expert_scale[slots[t][j].first];
        c.top_idx[t * K + j] = slots[t][j].first;
        c.top_w[t * K + j] = static_cast<float>(w);
      }
    }
  }
  c.y.assign(n * H, 0.0f);
  const int64_t W = k.expert_width();
  for (int64_t t = 0; t < n; ++t) {
    Vec xt(c.x.begin() + t * H, c.x.begin() + (t + 1) * H);
    // The rows the routed experts read: the latent projection of x, or x
    // after the routed branch's pre-norm, or x.
    Vec xe = xt;
    if (k.latent > 0) {
      xe = Linear(c.latent_w1, c.latent_b1, k.latent, xt);
    } else if (k.branch_norms) {
      xe = RmsNorm(xt, k.norm_eps, c.experts_in_norm);
    }
    Vec acc(W, 0.0);
    for (const auto& [e, w] : slots[t]) {
      if (w == 0.0) continue;    // dropped
      if (e >= k.num_experts) {  // a zero expert: the token itself
        for (int64_t j = 0; j < H; ++j) acc[j] += w * xt[j];
        continue;
      }
      const int64_t off = e * k.inter * W;
      if (k.score_before_experts) {
        Vec sx(H);
        for (int64_t j = 0; j < H; ++j) sx[j] = w * xt[j];
        Vec o = Expert(c, c.w1, c.w3, c.w2, off, k.inter, sx, e);
        for (int64_t j = 0; j < H; ++j) acc[j] += o[j];
      } else {
        Vec o = Expert(c, c.w1, c.w3, c.w2, off, k.inter, xe, e);
        for (int64_t j = 0; j < W; ++j) acc[j] += w * o[j];
      }
    }
    if (k.latent > 0) {
      if (k.latent_norm) acc = RmsNorm(acc, k.norm_eps, c.latent_norm);
      acc = Linear(c.latent_w2, c.latent_b2, H, acc);
    } else if (k.branch_norms) {
      acc = RmsNorm(acc, k.norm_eps, c.experts_out_norm);
    }
    if (k.has_shared()) {
      const Vec xs =
          k.branch_norms ? RmsNorm(xt, k.norm_eps, c.shared_in_norm) : xt;
      Vec o = Expert(c, c.sw1, c.sw3, c.sw2, 0, k.shared_inter, xs);
      if (k.branch_norms) o = RmsNorm(o, k.norm_eps, c.shared_out_norm);
      double gate = 1.0;
      if (k.shared_gate) {
        double d = 0;
        for (int64_t j = 0; j < H; ++j) d += double(c.sgate[j]) * xt[j];
        gate = 1 / (1 + std::exp(-d));
      }
      for (int64_t j = 0; j < H; ++j) acc[j] += gate * o[j];
    }
    for (int64_t j = 0; j < H; ++j) {
      double v = k.output_scale * acc[j];
      if (k.output_bias) v += c.output_bias[j];
      c.y[t * H + j] = static_cast<float>(v);
    }
  }
}

GoldenCase RandomCase(const MoeLayerConfig& k, int64_t n, uint64_t seed,
                      const std::string& name) {
  GoldenCase c;
  c.name = name;
  c.config = k;
  c.tokens = n;
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<float>& v, int64_t count, double scale) {
    std::uniform_real_distribution<double> u(-scale, scale);
    v.resize(count);
    for (float& f : v) f = static_cast<float>(u(rng));
  };
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter,
                S = k.shared_inter, W = k.expert_width();
  fill(c.x, n * H, 1.7);
  const int64_t R = k.router_rows();
  fill(c.gate, R * H, 1.7 / std::sqrt(double(H)));
  if (k.use_bias) fill(c.bias, R, 0.05);
  if (k.output_bias) fill(c.output_bias, H, 0.5);
  if (k.gated) fill(c.w1, E * I * W, 1.7 / std::sqrt(double(W)));
  fill(c.w3, E * I * W, 1.7 / std::sqrt(double(W)));
  fill(c.w2, E * I * W, 1.7 / std::sqrt(double(I)));
  // Norm weights and scales around 1, so that every one of them matters.
  auto fill_around_one = [&](std::vector<float>& v, int64_t count) {
    fill(v, count, 0.5);
    for (float& f : v) f += 1.0f;
  };
  if (k.latent > 0) {
    fill(c.latent_w1, k.latent * H, 1.7 / std::sqrt(double(H)));
    fill(c.latent_w2, H * k.latent, 1.7 / std::sqrt(double(k.latent)));
  }
  if (k.latent_bias) {
    fill(c.latent_b1, k.latent, 0.5);
    fill(c.latent_b2, H, 0.5);
  }
  if (k.latent_norm) fill_around_one(c.latent_norm, k.latent);
  if (k.router_prenorm) fill_around_one(c.gate_scale, H);
  if (k.per_expert_scale) fill_around_one(c.per_expert_scale, E);
  if (k.branch_norms) {
    fill_around_one(c.experts_in_norm, H);
    fill_around_one(c.experts_out_norm, H);
    fill_around_one(c.shared_in_norm, H);
    fill_around_one(c.shared_out_norm, H);
  }
  if (S > 0) {
    if (k.gated) fill(c.sw1, S * H, 1.7 / std::sqrt(double(H)));
    fill(c.sw3, S * H, 1.7 / std::sqrt(double(H)));
    fill(c.sw2, S * H, 1.7 / std::sqrt(double(S)));
  }
  if (k.shared_gate) fill(c.sgate, H, 1.7 / std::sqrt(double(H)));
  if (k.router_bias) fill(c.router_bias, R, 0.5);
  if (k.expert_bias) {
    fill(c.b1, E * I, 0.5);
    fill(c.b3, E * I, 0.5);
    fill(c.b2, E * H, 0.5);
  }
  if (k.hash_routed()) {
    // k distinct experts per row, and one token id per row of x.
    c.tid2eid.resize(k.hash_vocab * k.top_k);
    std::vector<int64_t> perm(E);
    for (int64_t v = 0; v < k.hash_vocab; ++v) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::copy(perm.begin(), perm.begin() + k.top_k,
                c.tid2eid.begin() + v * k.top_k);
    }
    std::uniform_int_distribution<int64_t> id(0, k.hash_vocab - 1);
    c.token_ids.resize(n);
    for (int64_t& t : c.token_ids) t = id(rng);
  }
  RunReferenceMoe(c);
  return c;
}

}  // namespace moe::testing
