// ggml_moe: the llama.cpp (ggml) peer of moe-bench's synthetic CPU layer.
// It builds one MoE FFN graph the way llama.cpp's build_moe_ffn
// does for a DeepSeek-V2-Lite layer (softmax gating, top-k, no weight
// normalisation, scale 1, SwiGLU experts through ggml_mul_mat_id, plus a
// shared SwiGLU expert through plain ggml_mul_mat), with random weights
// quantised by ggml's own quantisers and placed, as llama.cpp's CPU loader
// does, in the first of the CPU device's extra buffer types (CPU_REPACK and
// the like) whose supports_op accepts the weight's op, else in plain CPU
// memory. Times ggml_backend_graph_compute on a fresh input per step and
// prints one key=value line. Built against a llama.cpp/ggml checkout by
// bench/ggml-compare.sh; not part of the project's build.
//
//   ggml_moe --type bf16|q8_0|q4_0|mxfp4|f32 [--shared-type T|none]
//            [--hidden 2048] [--inter 1408] [--experts 64] [--top-k 6]
//            [--shared-inter 2816] [--tokens 8] [--reps 10] [--threads 2]
//            [--seed 1] [--check]
//
// --check also runs the same layer naively in fp32 on the dequantised
// weights (routing from the same fp32 gate) and prints the relative RMS
// error; it exits 1 when the output is not finite, does not change with
// the input, or is further than 5% RMS from that reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Args {
  ggml_type type = GGML_TYPE_BF16;
  ggml_type shared_type = GGML_TYPE_COUNT;  // COUNT: same as --type
  bool shared = true;
  int64_t hidden = 2048, inter = 1408, experts = 64, top_k = 6;
  int64_t shared_inter = 2816, tokens = 8;
  int reps = 10, threads = 2;
  uint64_t seed = 1;
  bool check = false;
};

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "ggml_moe: %s\n", msg.c_str());
  std::exit(2);
}

ggml_type ParseType(const std::string& flag, const std::string& s) {
  if (s == "f32") return GGML_TYPE_F32;
  if (s == "bf16") return GGML_TYPE_BF16;
  if (s == "q8_0") return GGML_TYPE_Q8_0;
  if (s == "q4_0") return GGML_TYPE_Q4_0;
  if (s == "mxfp4") return GGML_TYPE_MXFP4;
  Fail(flag + " " + s + ": expected f32, bf16, q8_0, q4_0 or mxfp4");
}

int64_t ParseInt(const std::string& flag, const char* s, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < min) {
    Fail(flag + " " + s + ": expected an integer >= " + std::to_string(min));
  }
  return v;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--check") {
      a.check = true;
      continue;
    }
    if (i + 1 >= argc)
      Fail(f + ": missing value (see the header of ggml_moe.cc)");
    const char* v = argv[++i];
    if (f == "--type") {
      a.type = ParseType(f, v);
    } else if (f == "--shared-type") {
      if (std::string(v) == "none") {
        a.shared = false;
      } else {
        a.shared_type = ParseType(f, v);
      }
    } else if (f == "--hidden") {
      a.hidden = ParseInt(f, v, 1);
    } else if (f == "--inter") {
      a.inter = ParseInt(f, v, 1);
    } else if (f == "--experts") {
      a.experts = ParseInt(f, v, 1);
    } else if (f == "--top-k") {
      a.top_k = ParseInt(f, v, 1);
    } else if (f == "--shared-inter") {
      a.shared_inter = ParseInt(f, v, 0);
    } else if (f == "--tokens") {
      a.tokens = ParseInt(f, v, 1);
    } else if (f == "--reps") {
      a.reps = static_cast<int>(ParseInt(f, v, 1));
    } else if (f == "--threads") {
      a.threads = static_cast<int>(ParseInt(f, v, 1));
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(ParseInt(f, v, 0));
    } else {
      Fail("unknown flag " + f + " (see the header of ggml_moe.cc)");
    }
  }
  if (a.shared_type == GGML_TYPE_COUNT) a.shared_type = a.type;
  if (a.shared_inter == 0) a.shared = false;
  if (a.top_k > a.experts) Fail("--top-k must be <= --experts");
  return a;
}

// splitmix64: a fast, seedable stream of uniform floats in [-1, 1).
struct Rng {
  uint64_t s;
  float Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

// One weight: the ggml tensor [K, R, E] (E = 1 for a plain matrix) and, for
// --check, its values after quantisation, widened back to fp32.
struct Weight {
  const char* name;
  ggml_type type;
  int64_t k, rows, n;
  ggml_tensor* t = nullptr;
  std::string buft;
  std::vector<float> deq;
};

// Whether `buft` can hold `w` for its op, asked the way llama.cpp asks: the
// op built on a tensor whose buffer is a zero-size buffer of that type, then
// the CPU device's supports_op (which defers to the extra type's).
bool BuftSupports(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft,
                  const Weight& w, int64_t top_k, int64_t tokens) {
  ggml_init_params p = {ggml_tensor_overhead() * 8, nullptr, true};
  ggml_context* ctx = ggml_init(p);
  ggml_tensor* t = w.n > 1 ? ggml_new_tensor_3d(ctx, w.type, w.k, w.rows, w.n)
                           : ggml_new_tensor_2d(ctx, w.type, w.k, w.rows);
  ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
  t->buffer = dummy;
  ggml_tensor* op;
  if (w.n > 1) {
    ggml_tensor* in =
        ggml_new_tensor_3d(ctx, GGML_TYPE_F32, w.k, top_k, tokens);
    ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, top_k, tokens);
    op = ggml_mul_mat_id(ctx, t, in, ids);
  } else {
    op = ggml_mul_mat(ctx, t,
                      ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w.k, tokens));
  }
  const bool ok = ggml_backend_dev_supports_op(dev, op);
  t->buffer = nullptr;
  ggml_backend_buffer_free(dummy);
  ggml_free(ctx);
  return ok;
}

// Random weights with variance 1/K (so activations keep their scale),
// quantised slice by slice by ggml's quantiser and set whole (a repacking
// buffer takes a tensor only whole).
void FillWeight(Weight* w, Rng* rng, bool keep) {
  const size_t row_bytes = ggml_row_size(w->type, w->k);
  std::vector<uint8_t> q(row_bytes * w->rows * w->n);
  std::vector<float> f(w->k * w->rows);
  const float a = std::sqrt(3.0f / static_cast<float>(w->k));
  if (keep) w->deq.resize(w->k * w->rows * w->n);
  const ggml_type_traits* tt = ggml_get_type_traits(w->type);
  for (int64_t e = 0; e < w->n; ++e) {
    for (float& v : f) v = a * rng->Next();
    uint8_t* dst = q.data() + e * w->rows * row_bytes;
    if (w->type == GGML_TYPE_F32) {
      std::memcpy(dst, f.data(), f.size() * sizeof(float));
    } else {
      ggml_quantize_chunk(w->type, f.data(), dst, 0, w->rows, w->k, nullptr);
    }
    if (keep) {
      float* out = w->deq.data() + e * w->rows * w->k;
      if (w->type == GGML_TYPE_F32) {
        std::memcpy(out, dst, f.size() * sizeof(float));
      } else {
        tt->to_float(dst, out, w->k * w->rows);
      }
    }
  }
  ggml_backend_tensor_set(w->t, q.data(), 0, q.size());
}

// x [H, N] -> y [H, N] as llama.cpp's build_moe_ffn (DeepSeek-V2-Lite:
// softmax gating, no normalisation of the top-k weights, scale 1) plus the
// shared expert as build_ffn builds it (SiLU, parallel gate).
ggml_tensor* BuildMoe(ggml_context* ctx, ggml_cgraph* gf, ggml_tensor* x,
                      const Args& a, Weight* w) {
  const int64_t H = a.hidden, N = a.tokens, E = a.experts, k = a.top_k;
  ggml_tensor* logits = ggml_mul_mat(ctx, w[0].t, x);         // [E, N]
  ggml_tensor* probs = ggml_soft_max(ctx, logits);            // [E, N]
  ggml_tensor* selected = ggml_argsort_top_k(ctx, probs, k);  // [k, N]
  ggml_tensor* weights =
      ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, E, N), selected);
  ggml_build_forward_expand(gf, weights);  // [1, k, N]
  ggml_tensor* cur = ggml_reshape_3d(ctx, x, H, 1, N);
  ggml_tensor* up = ggml_mul_mat_id(ctx, w[1].t, cur, selected);    // [I, k, N]
  ggml_tensor* gate = ggml_mul_mat_id(ctx, w[2].t, cur, selected);  // [I, k, N]
  ggml_tensor* act = ggml_swiglu_split(ctx, gate, up);
  ggml_tensor* experts =
      ggml_mul_mat_id(ctx, w[3].t, act, selected);  // [H, k, N]
  experts = ggml_mul(ctx, experts, weights);
  ggml_build_forward_expand(gf, experts);
  std::vector<ggml_tensor*> views(k);
  for (int64_t i = 0; i < k; ++i) {
    views[i] =
        ggml_view_2d(ctx, experts, H, N, experts->nb[2], i * experts->nb[1]);
    ggml_build_forward_expand(gf, views[i]);
  }
  ggml_tensor* out = views[0];
  for (int64_t i = 1; i < k; ++i) out = ggml_add(ctx, out, views[i]);
  if (a.shared) {
    ggml_tensor* s_up = ggml_mul_mat(ctx, w[4].t, x);
    ggml_tensor* s_gate = ggml_mul_mat(ctx, w[5].t, x);
    ggml_tensor* s =
        ggml_mul_mat(ctx, w[6].t, ggml_swiglu_split(ctx, s_gate, s_up));
    out = ggml_add(ctx, out, s);
  }
  return out;
}

float Silu(float v) { return v / (1.0f + std::exp(-v)); }

// y = W x for W [rows, K] row-major (ggml's [K, rows]).
void MatVec(const float* W, const float* x, int64_t K, int64_t rows, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < K; ++c)
      s += static_cast<double>(W[r * K + c]) * x[c];
    y[r] = static_cast<float>(s);
  }
}

// The same layer naively in fp32 on the dequantised weights.
std::vector<float> Reference(const Args& a, const Weight* w, const float* x) {
  const int64_t H = a.hidden, I = a.inter, E = a.experts, k = a.top_k;
  const int64_t S = a.shared_inter;
  std::vector<float> y(H * a.tokens, 0.0f), logit(E), u(std::max(I, S)),
      g(std::max(I, S)), d(H);
  std::vector<int64_t> order(E);
  for (int64_t n = 0; n < a.tokens; ++n) {
    const float* xn = x + n * H;
    MatVec(w[0].deq.data(), xn, H, E, logit.data());
    const float mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (float& l : logit) z += (l = std::exp(l - mx));
    for (float& l : logit) l = static_cast<float>(l / z);
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(
        order.begin(), order.begin() + k, order.end(),
        [&](int64_t p, int64_t q) { return logit[p] > logit[q]; });
    float* yn = y.data() + n * H;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      MatVec(w[1].deq.data() + e * I * H, xn, H, I, u.data());
      MatVec(w[2].deq.data() + e * I * H, xn, H, I, g.data());
      for (int64_t i = 0; i < I; ++i) g[i] = Silu(g[i]) * u[i];
      MatVec(w[3].deq.data() + e * H * I, g.data(), I, H, d.data());
      for (int64_t h = 0; h < H; ++h) yn[h] += logit[e] * d[h];
    }
    if (a.shared) {
      MatVec(w[4].deq.data(), xn, H, S, u.data());
      MatVec(w[5].deq.data(), xn, H, S, g.data());
      for (int64_t i = 0; i < S; ++i) g[i] = Silu(g[i]) * u[i];
      MatVec(w[6].deq.data(), g.data(), S, H, d.data());
      for (int64_t h = 0; h < H; ++h) yn[h] += d[h];
    }
  }
  return y;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const int64_t H = a.hidden, I = a.inter, E = a.experts, S = a.shared_inter;
  const int64_t N = a.tokens;
  ggml_backend_t backend = ggml_backend_cpu_init();
  if (backend == nullptr) Fail("ggml_backend_cpu_init failed");
  ggml_backend_cpu_set_n_threads(backend, a.threads);
  ggml_backend_dev_t dev = ggml_backend_get_device(backend);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);

  // The candidate weight buffer types in llama.cpp's order for the CPU:
  // the extra (repacking) types first, then plain CPU memory.
  std::vector<ggml_backend_buffer_type_t> extra;
  auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(reg,
                                        "ggml_backend_dev_get_extra_bufts"));
  if (get_extra != nullptr) {
    for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b)
      extra.push_back(*b);
  }

  Weight w[7] = {{"gate_inp", GGML_TYPE_F32, H, E, 1},
                 {"up_exps", a.type, H, I, E},
                 {"gate_exps", a.type, H, I, E},
                 {"down_exps", a.type, I, H, E},
                 {"up_shexp", a.shared_type, H, S, 1},
                 {"gate_shexp", a.shared_type, H, S, 1},
                 {"down_shexp", a.shared_type, S, H, 1}};
  const int n_weights = a.shared ? 7 : 4;
  for (int i = 0; i < n_weights; ++i) {
    if (w[i].k % ggml_blck_size(w[i].type) != 0) {
      Fail(std::string(w[i].name) + ": input width " + std::to_string(w[i].k) +
           " is not a multiple of " + ggml_type_name(w[i].type) +
           "'s block of " + std::to_string(ggml_blck_size(w[i].type)));
    }
  }

  // One context (and buffer) per buffer type chosen.
  std::vector<ggml_backend_buffer_type_t> bufts = extra;
  bufts.push_back(ggml_backend_cpu_buffer_type());
  std::vector<ggml_context*> ctxs(bufts.size(), nullptr);
  for (int i = 0; i < n_weights; ++i) {
    size_t b = bufts.size() - 1;
    for (size_t j = 0; j < extra.size(); ++j) {
      if (BuftSupports(dev, extra[j], w[i], a.top_k, 512)) {
        b = j;
        break;
      }
    }
    if (ctxs[b] == nullptr) {
      ggml_init_params p = {ggml_tensor_overhead() * 8, nullptr, true};
      ctxs[b] = ggml_init(p);
    }
    w[i].t =
        w[i].n > 1
            ? ggml_new_tensor_3d(ctxs[b], w[i].type, w[i].k, w[i].rows, w[i].n)
            : ggml_new_tensor_2d(ctxs[b], w[i].type, w[i].k, w[i].rows);
    ggml_set_name(w[i].t, w[i].name);
    w[i].buft = ggml_backend_buft_name(bufts[b]);
  }
  std::vector<ggml_backend_buffer_t> buffers;
  double weight_bytes = 0;
  for (size_t b = 0; b < bufts.size(); ++b) {
    if (ctxs[b] == nullptr) continue;
    ggml_backend_buffer_t buf =
        ggml_backend_alloc_ctx_tensors_from_buft(ctxs[b], bufts[b]);
    if (buf == nullptr)
      Fail(std::string("cannot allocate ") + ggml_backend_buft_name(bufts[b]));
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    buffers.push_back(buf);
  }
  Rng rng{a.seed * 0x100000001B3ull + 7};
  for (int i = 0; i < n_weights; ++i) {
    FillWeight(&w[i], &rng, a.check);
    if (i > 0) weight_bytes += static_cast<double>(ggml_nbytes(w[i].t));
  }

  // The graph, its input and its work memory.
  const size_t n_nodes = 64 + 2 * static_cast<size_t>(a.top_k);
  ggml_init_params gp = {
      ggml_tensor_overhead() * n_nodes + ggml_graph_overhead(), nullptr, true};
  ggml_context* gctx = ggml_init(gp);
  ggml_cgraph* gf = ggml_new_graph(gctx);
  ggml_tensor* x = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, H, N);
  ggml_set_input(x);
  ggml_tensor* y = BuildMoe(gctx, gf, x, a, w);
  ggml_set_output(y);
  ggml_build_forward_expand(gf, y);
  ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
  if (!ggml_gallocr_alloc_graph(galloc, gf)) Fail("cannot allocate the graph");

  // Two warm-up steps, then `reps` timed ones, each on a fresh input so
  // that each sees fresh routing, as moe-bench does.
  std::vector<float> xin(H * N), out(H * N), first;
  std::vector<double> ms;
  Rng xrng{a.seed * 0x9E3779B97F4A7C15ull + 11};
  for (int r = 0; r < a.reps + 2; ++r) {
    for (float& v : xin) v = xrng.Next();
    ggml_backend_tensor_set(x, xin.data(), 0, ggml_nbytes(x));
    const auto t0 = std::chrono::steady_clock::now();
    if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
      Fail("graph compute failed");
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= 2)
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (a.check && r <= 1) {
      ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
      if (r == 0) {
        first = out;
        continue;
      }
      // Step 1: compare with the naive reference on this input.
      const std::vector<float> ref = Reference(a, w, xin.data());
      double err2 = 0, ref2 = 0, max_err = 0;
      bool finite = true, varies = false;
      for (int64_t i = 0; i < H * N; ++i) {
        finite = finite && std::isfinite(out[i]);
        varies = varies || out[i] != first[i];
        const double e = static_cast<double>(out[i]) - ref[i];
        err2 += e * e;
        ref2 += static_cast<double>(ref[i]) * ref[i];
        max_err = std::max(max_err, std::fabs(e));
      }
      const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
      const double ref_rms = std::sqrt(ref2 / static_cast<double>(H * N));
      std::printf(
          "ggml_moe check type=%s finite=%d varies=%d rel_rms=%.3g "
          "max_err_rms=%.3g\n",
          ggml_type_name(a.type), finite, varies, rel,
          ref_rms > 0 ? max_err / ref_rms : 0);
      if (!finite || !varies || !(rel <= 0.05)) {
        std::fprintf(stderr, "ggml_moe: check failed\n");
        return 1;
      }
    }
  }
  const double med = Median(ms);
  std::string placement;
  for (int i = 1; i < n_weights; ++i) {
    placement += (i > 1 ? "," : "") + std::string(w[i].name) + ":" + w[i].buft;
  }
  std::printf(
      "ggml_moe type=%s shared_type=%s H=%lld I=%lld E=%lld k=%lld shared=%lld "
      "N=%lld "
      "threads=%d reps=%d step_ms=%.3f min_ms=%.3f max_ms=%.3f "
      "tokens_per_s=%.2f "
      "weights_mib=%.1f bufs=%s\n",
      ggml_type_name(a.type), a.shared ? ggml_type_name(a.shared_type) : "none",
      static_cast<long long>(H), static_cast<long long>(I),
      static_cast<long long>(E), static_cast<long long>(a.top_k),
      static_cast<long long>(a.shared ? S : 0), static_cast<long long>(N),
      a.threads, a.reps, med, *std::min_element(ms.begin(), ms.end()),
      *std::max_element(ms.begin(), ms.end()), N / (med / 1e3),
      weight_bytes / 1048576.0, placement.c_str());

  ggml_gallocr_free(galloc);
  ggml_free(gctx);
  for (ggml_backend_buffer_t b : buffers) ggml_backend_buffer_free(b);
  for (ggml_context* c : ctxs) {
    if (c) ggml_free(c);
  }
  ggml_backend_free(backend);
  return 0;
}
