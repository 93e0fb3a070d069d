// moe-cli: talk to a running MoE service.
//   moe-cli forward --target HOST:PORT --layer L (--input IN.safetensors |
//       --random N) [--output OUT.safetensors] [--dtype f32|bf16|f16]
//       [--timeout-ms T] [--routing] [--timing] [--routing-file F |
//       --router-logits-file F] [--shared add|separate|skip]
//       [--return-router-logits]
//   moe-cli info | stats --layer L [--reset] [--save FILE.json] | placement
//       | rebalance | health [--service NAME] [--wait 60s]
// Exits with the server's gRPC status code (e.g. 3 INVALID_ARGUMENT,
// 14 UNAVAILABLE) and its message on failure; 64 for usage errors.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/moe_client.h"
#include "core/flag_help.h"
#include "core/moe_config.h"
#include "core/safetensors.h"
#include "core/synthetic_model.h"
#include "core/tensor_io.h"
#include "google/protobuf/util/json_util.h"

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
ABSL_FLAG(int, layer, 0, "MoE layer");
ABSL_FLAG(std::string, input, "", "forward: safetensors file holding x [N, H]");
ABSL_FLAG(std::string, input_tensor, "x", "forward: name of the input tensor");
ABSL_FLAG(int64_t, random, -1,
          "forward: send N random tokens instead of --input");
ABSL_FLAG(uint64_t, seed, 7, "forward: seed of --random inputs");
ABSL_FLAG(std::string, output, "",
          "forward: write y (and top_idx/top_w with --routing) here");
ABSL_FLAG(std::string, dtype, "f32", "forward: wire dtype f32, bf16 or f16");
ABSL_FLAG(int64_t, timeout_ms, 30000, "deadline of each call");
ABSL_FLAG(bool, routing, false, "forward: return each token's routing");
ABSL_FLAG(std::string, token_ids, "",
          "forward: the rows' token ids, comma-separated, one per row (a "
          "hash-routed layer needs them; 'random': uniform in the model's "
          "vocabulary from --seed). Default: the input file's 'token_ids' "
          "tensor when it has one");
ABSL_FLAG(std::string, token_types, "",
          "forward: the rows' modalities, comma-separated, one per row (0 "
          "text, 1 image, 2 video), or 'text' / 'image' for every row: a "
          "layer with vision experts (ERNIE-4.5-VL) needs them. Default: the "
          "input file's 'token_types' tensor when it has one");
ABSL_FLAG(bool, timing, false, "forward: return the time of each stage");
ABSL_FLAG(std::string, routing_file, "",
          "forward: send this routing instead of letting the service route "
          "(routing replay): a safetensors file holding top_idx (I64 [N, k], "
          "k = the layer's top_k) and top_w (F32 [N, k], final weights), as "
          "--output writes them with --routing");
ABSL_FLAG(std::string, router_logits_file, "",
          "forward: send gate logits for the service to score instead of "
          "x·Wᵀ: a safetensors file holding router_logits (F32 or BF16 "
          "[N, experts], x·Wᵀ plus the router bias where the layer has one), "
          "as --output writes them with --return_router_logits");
ABSL_FLAG(std::string, shared, "add",
          "forward: the shared experts: add (y = routed + shared), separate "
          "(y = routed; shared_output apart, written to --output) or skip "
          "(not computed: y = routed)");
ABSL_FLAG(bool, return_router_logits, false,
          "forward: return the gate logits [N, experts] (f32; written to "
          "--output as router_logits)");
ABSL_FLAG(bool, reset, false, "stats: zero the counters after reading");
ABSL_FLAG(std::string, save, "",
          "stats: also write every MoE layer's stats here as JSON (the "
          "router's --expert-load)");
ABSL_FLAG(std::string, service, "", "health: service name ('' = overall)");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "health: ask again until SERVING or this long has passed (e.g. "
          "60s), for a service that is starting; exit as without it");

namespace moe {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "moe-cli: %s: %s\n",
               absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kOk ? 1 : static_cast<int>(s.code());
}

std::chrono::milliseconds Timeout() {
  return std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
}

// "1 request", "2 requests".
std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// Per-row integers from a flag: `flag_value` comma-separated, or by default
// the --input file's tensor `name` (an integer [N]) when it has one; 0 or
// the exit code of the failure. `expected` says what the flag takes.
int ReadRowInts(const std::string& flag_value, const char* name,
                const char* expected, std::vector<int64_t>* out) {
  if (!flag_value.empty()) {
    for (absl::string_view part : absl::StrSplit(flag_value, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v)) {
        std::fprintf(stderr,
                     "moe-cli: --%s: '%s' is not an integer (expected %s)\n",
                     name, std::string(part).c_str(), expected);
        return kExitUsage;
      }
      out->push_back(v);
    }
    return 0;
  }
  const std::string input = absl::GetFlag(FLAGS_input);
  if (input.empty()) return 0;
  auto f = SafetensorsFile::Open(input);
  if (!f.ok() || !(*f)->Has(name)) return 0;
  auto v = (*f)->ReadI64(name);
  if (!v.ok()) {
    std::fprintf(stderr, "moe-cli: %s: %s: %s\n", input.c_str(), name,
                 std::string(v.status().message()).c_str());
    return kExitUsage;
  }
  *out = std::move(*v);
  return 0;
}

// --token_ids: a list, 'random' (in the model's vocabulary), or by default
// the --input file's 'token_ids' tensor (I64 [N]) when it has one.
int ReadTokenIds(MoeClient& client, int64_t rows, std::vector<int64_t>* ids) {
  const std::string flag = absl::GetFlag(FLAGS_token_ids);
  if (flag == "random") {
    auto info = client.GetModelInfo(Timeout());
    if (!info.ok()) return Fail(info.status());
    if (info->hash_vocab() <= 0) {
      std::fprintf(stderr,
                   "moe-cli: --token_ids=random needs a hash-routed model "
                   "(GetModelInfo hash_vocab is 0)\n");
      return kExitUsage;
    }
    uint64_t s = absl::GetFlag(FLAGS_seed) * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < rows; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      ids->push_back(static_cast<int64_t>(
          (s >> 33) % static_cast<uint64_t>(info->hash_vocab())));
    }
    return 0;
  }
  return ReadRowInts(flag, "token_ids", "comma-separated ids or 'random'", ids);
}

// --token_types: a list, 'text' or 'image' (every row), or by default the
// --input file's 'token_types' tensor when it has one.
int ReadTokenTypes(int64_t rows, std::vector<int32_t>* types) {
  const std::string flag = absl::GetFlag(FLAGS_token_types);
  if (flag == "text" || flag == "image") {
    types->assign(rows, flag == "text" ? 0 : 1);
    return 0;
  }
  std::vector<int64_t> v;
  const int rc = ReadRowInts(
      flag, "token_types",
      "comma-separated 0 (text), 1 (image) or 2 (video), or 'text' or 'image'",
      &v);
  // The service names a type outside 0-2; one outside int32 is sent as -1.
  for (int64_t t : v) {
    types->push_back(t >= INT32_MIN && t <= INT32_MAX ? static_cast<int32_t>(t)
                                                      : -1);
  }
  return rc;
}

// The rows to send: --random N synthetic ones of the model's width, or
// --input FILE's tensor; 0 or the exit code of the failure.
int ReadForwardInput(MoeClient& client, Matrix* out) {
  Matrix& x = *out;
  if (absl::GetFlag(FLAGS_random) >= 0) {
    auto info = client.GetModelInfo(Timeout());
    if (!info.ok()) return Fail(info.status());
    x.rows = absl::GetFlag(FLAGS_random);
    x.cols = info->hidden();
    x.data.resize(x.rows * x.cols);
    FillSyntheticInput(absl::GetFlag(FLAGS_seed), x.rows * x.cols,
                       x.data.data());
  } else if (!absl::GetFlag(FLAGS_input).empty()) {
    auto m = ReadMatrix(absl::GetFlag(FLAGS_input),
                        absl::GetFlag(FLAGS_input_tensor));
    if (!m.ok()) {
      std::fprintf(stderr, "moe-cli: %s\n",
                   std::string(m.status().message()).c_str());
      return kExitUsage;
    }
    x = std::move(*m);
  } else {
    std::fprintf(stderr, "moe-cli forward: give --input FILE or --random N\n");
    return kExitUsage;
  }
  return 0;
}

// --routing_file, --router_logits_file and --shared into `opts` for `rows`
// rows; 0 or the exit code of the failure.
int ReadCallerRouting(int64_t rows, ForwardOptions* opts) {
  const std::string shared = absl::GetFlag(FLAGS_shared);
  if (shared == "add") {
    opts->shared = moe::v1::SHARED_ADD;
  } else if (shared == "separate") {
    opts->shared = moe::v1::SHARED_SEPARATE;
  } else if (shared == "skip") {
    opts->shared = moe::v1::SHARED_SKIP;
  } else {
    std::fprintf(stderr,
                 "moe-cli: --shared must be add, separate or skip, got '%s'\n",
                 shared.c_str());
    return kExitUsage;
  }
  opts->return_router_logits = absl::GetFlag(FLAGS_return_router_logits);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "moe-cli: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  };
  if (const std::string path = absl::GetFlag(FLAGS_routing_file);
      !path.empty()) {
    auto w = ReadMatrix(path, "top_w");
    if (!w.ok()) return fail(w.status());
    auto f = SafetensorsFile::Open(path);
    if (!f.ok()) return fail(f.status());
    auto idx = (*f)->ReadI64("top_idx");
    if (!idx.ok()) return fail(idx.status());
    if (w->rows != rows || idx->size() != w->data.size()) {
      std::fprintf(stderr,
                   "moe-cli: %s: top_idx and top_w must both be [N, k] with "
                   "N = %ld rows of the input\n",
                   path.c_str(), static_cast<long>(rows));
      return kExitUsage;
    }
    opts->routing_slots = static_cast<int32_t>(w->cols);
    opts->routing_expert_ids.assign(idx->begin(), idx->end());
    opts->routing_weights = std::move(w->data);
  }
  if (const std::string path = absl::GetFlag(FLAGS_router_logits_file);
      !path.empty()) {
    auto m = ReadMatrix(path, "router_logits");
    if (!m.ok()) return fail(m.status());
    opts->router_logits = std::move(m->data);
    opts->router_logits_experts = m->cols;
  }
  return 0;
}

// The answer's size, rms and time; token 0's routing (--routing) and the
// stage times (--timing) when asked for.
void PrintForwardResult(const ForwardResult& r, const ForwardOptions& opts,
                        double ms) {
  double sum_sq = 0;
  for (float v : r.y) sum_sq += static_cast<double>(v) * v;
  std::printf("layer %d: %s x %ld -> y, rms %.6f, %.2f ms\n",
              absl::GetFlag(FLAGS_layer), Count(r.tokens, "token").c_str(),
              static_cast<long>(r.hidden),
              r.y.empty() ? 0.0 : std::sqrt(sum_sq / r.y.size()), ms);
  if (opts.routing && r.tokens > 0) {
    std::vector<std::string> first;
    for (int32_t s = 0; s < r.slots; ++s) {
      first.push_back(absl::StrCat(r.expert_ids[s], ":",
                                   absl::StrFormat("%.4f", r.weights[s])));
    }
    std::printf("routing: %d slots per token; token 0 -> %s\n", r.slots,
                absl::StrJoin(first, " ").c_str());
  }
  if (opts.timing) {
    const auto& t = r.timing;
    std::printf(
        "timing (us): queue %.0f route %.0f plan %.0f dispatch %.0f experts "
        "%.0f combine %.0f shared %.0f wire %.0f total %.0f (step of %s "
        "from %s)\n",
        t.queue_us(), t.route_us(), t.plan_us(), t.dispatch_us(),
        t.experts_us(), t.combine_us(), t.shared_us(), t.wire_us(),
        t.total_us(), Count(t.batch_tokens(), "token").c_str(),
        Count(t.batch_requests(), "request").c_str());
    if (t.has_critical_worker()) {
      const auto& w = t.critical_worker();
      std::printf(
          "critical worker rank %d (us): decode %.0f gather %.0f "
          "dispatch-wait %.0f experts %.0f combine-wait %.0f sum %.0f "
          "step %.0f\n",
          w.rank(), w.decode_us(), w.gather_us(), w.dispatch_wait_us(),
          w.experts_us(), w.combine_wait_us(), w.sum_us(), w.step_us());
    }
  }
}

// --output: y, and the routing when asked for, as safetensors.
int WriteForwardOutput(const ForwardResult& r, bool routing) {
  const std::string out = absl::GetFlag(FLAGS_output);
  if (!out.empty()) {
    SafetensorsWriter w;
    w.AddF32("y", {r.tokens, r.hidden}, r.y);
    if (routing) {
      std::vector<int64_t> idx(r.expert_ids.begin(), r.expert_ids.end());
      w.AddI64("top_idx", {r.tokens, r.slots}, idx);
      w.AddF32("top_w", {r.tokens, r.slots}, r.weights);
    }
    if (!r.router_logits.empty()) {
      w.AddF32("router_logits",
               {r.tokens, static_cast<int64_t>(r.router_logits.size()) /
                              std::max<int64_t>(r.tokens, 1)},
               r.router_logits);
    }
    if (!r.shared_output.empty()) {
      w.AddF32("shared_output", {r.tokens, r.hidden}, r.shared_output);
    }
    if (absl::Status s = w.WriteFile(out); !s.ok()) {
      std::fprintf(stderr, "moe-cli: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}

int Forward(MoeClient& client) {
  ForwardOptions opts;
  const std::string dt = absl::GetFlag(FLAGS_dtype);
  opts.dtype = dt == "f32"    ? moe::v1::F32
               : dt == "bf16" ? moe::v1::BF16
               : dt == "f16"  ? moe::v1::F16
                              : moe::v1::DTYPE_UNSPECIFIED;
  if (opts.dtype == moe::v1::DTYPE_UNSPECIFIED) {
    std::fprintf(stderr, "moe-cli: --dtype must be f32, bf16 or f16\n");
    return kExitUsage;
  }
  opts.routing = absl::GetFlag(FLAGS_routing);
  opts.timing = absl::GetFlag(FLAGS_timing);
  opts.timeout = Timeout();
  Matrix x;
  if (int rc = ReadForwardInput(client, &x); rc != 0) return rc;
  if (int rc = ReadTokenIds(client, x.rows, &opts.token_ids); rc != 0) {
    return rc;
  }
  if (int rc = ReadTokenTypes(x.rows, &opts.token_types); rc != 0) return rc;
  if (int rc = ReadCallerRouting(x.rows, &opts); rc != 0) return rc;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client.Forward(absl::GetFlag(FLAGS_layer), x.data.data(), x.rows,
                          x.cols, opts);
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  if (!r.ok()) return Fail(r.status());
  PrintForwardResult(*r, opts, ms);
  return WriteForwardOutput(*r, opts.routing);
}

// A byte count for people: KiB, MiB or GiB; "unknown" for the -1 of a
// figure the server could not read.
std::string Bytes(int64_t bytes) {
  if (bytes < 0) return "unknown";
  const double b = static_cast<double>(bytes);
  if (b < 1024.0 * 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) {
    return absl::StrFormat("%.1f MiB", b / (1024 * 1024));
  }
  return absl::StrFormat("%.2f GiB", b / (1024 * 1024 * 1024));
}

int Info(MoeClient& client) {
  auto info = client.GetModelInfo(Timeout());
  if (!info.ok()) return Fail(info.status());
  std::printf("model: %s (%s)\n", info->source().c_str(),
              info->family().c_str());
  // The latent width, the activation and the gating come from the layer's
  // config (the proto has no fields of their own for them).
  std::string shape = "latent=? act=? gated=?";
  if (auto c = ParseMoeLayerConfigJson(info->layer_config_json()); c.ok()) {
    shape = absl::StrCat(
        "latent=", c->latent > 0 ? absl::StrCat(c->latent) : "none",
        " act=", ActivationName(c->act), " gated=", c->gated ? "yes" : "no");
  }
  std::printf(
      "layer: H=%ld I=%ld E=%ld k=%ld shared=%ld %s weights=%s\n",
      static_cast<long>(info->hidden()), static_cast<long>(info->inter()),
      static_cast<long>(info->experts()), static_cast<long>(info->top_k()),
      static_cast<long>(info->shared_inter()), shape.c_str(),
      info->weight_dtype().c_str());
  std::printf("routing: %s\n", info->layer_config_json().c_str());
  std::printf("moe layers: [%s]\n",
              absl::StrJoin(info->moe_layers(), ", ").c_str());
  if (info->hash_layers_size() > 0) {
    std::printf("hash-routed layers (need --token_ids): [%s], vocabulary %ld\n",
                absl::StrJoin(info->hash_layers(), ", ").c_str(),
                static_cast<long>(info->hash_vocab()));
  }
  const std::map<int32_t, int32_t> vision(info->vision_layers().begin(),
                                          info->vision_layers().end());
  for (const auto& [layer, v] : vision) {
    std::printf("vision experts of layer %d (need --token_types): layer %d\n",
                layer, v);
  }
  const std::map<int32_t, std::string> overrides(
      info->layer_config_overrides_json().begin(),
      info->layer_config_overrides_json().end());
  for (const auto& [layer, json] : overrides) {
    std::printf("config of layer %d: %s\n", layer, json.c_str());
  }
  std::printf("workers: %d (%d ready), ready: %s, device: %s\n",
              info->num_workers(), info->ready_workers(),
              info->ready() ? "yes" : "no", info->device().c_str());
  if (info->degraded()) {
    std::printf("degraded: serving with %d of %d workers\n",
                info->group_workers(), info->num_workers());
  }
  std::printf("limits: %ld tokens per step, %ld per request\n",
              static_cast<long>(info->max_batch_tokens()),
              static_cast<long>(info->max_request_tokens()));
  // The routed experts of every MoE layer, spread over the workers (held
  // by the router without workers); replicas are not counted.
  const int64_t all_experts = info->experts() * info->moe_layers_size();
  std::printf(
      "memory: routed experts %s each in %s (%s for all %ld in %s), "
      "router rss %s (peak %s)\n",
      Bytes(info->expert_weight_bytes()).c_str(), info->weight_dtype().c_str(),
      Bytes(info->expert_weight_bytes() * all_experts).c_str(),
      static_cast<long>(all_experts),
      Count(info->moe_layers_size(), "MoE layer").c_str(),
      Bytes(info->router_rss_bytes()).c_str(),
      Bytes(info->router_peak_rss_bytes()).c_str());
  return 0;
}

// Every MoE layer's GetExpertStats (the vision layers' too: their experts
// are placed by their own load), as a JSON array of ExpertStats.
absl::Status SaveStats(MoeClient& client, const std::string& path) {
  auto info = client.GetModelInfo(Timeout());
  if (!info.ok()) return info.status();
  std::vector<std::string> entries;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::vector<int32_t> layers(info->moe_layers().begin(),
                              info->moe_layers().end());
  for (const auto& [l, vision] : info->vision_layers()) {
    layers.push_back(vision);
  }
  std::sort(layers.begin(), layers.end());
  for (int32_t layer : layers) {
    auto s = client.GetExpertStats(layer, false, Timeout());
    if (!s.ok()) return s.status();
    std::string json;
    auto st = google::protobuf::util::MessageToJsonString(*s, &json, opts);
    if (!st.ok()) return absl::InternalError(st.ToString());
    entries.push_back(std::move(json));
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("--save: cannot write ", path));
  }
  const std::string text =
      absl::StrCat("[", absl::StrJoin(entries, ",\n"), "]\n");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::DataLossError(absl::StrCat("--save: writing ", path));
  }
  return absl::OkStatus();
}

int Stats(MoeClient& client) {
  auto s = client.GetExpertStats(absl::GetFlag(FLAGS_layer),
                                 absl::GetFlag(FLAGS_reset), Timeout());
  if (!s.ok()) return Fail(s.status());
  std::printf("layer %d: %s, %s, %s\n", s->layer(),
              Count(s->steps(), "step").c_str(),
              Count(s->tokens(), "token").c_str(),
              Count(s->dropped_slots(), "dropped slot").c_str());
  std::printf(
      "balance: entropy %.4f (normalised %.4f), gini %.4f, max/mean "
      "%.3f, min/mean %.3f\n",
      s->entropy(), s->normalized_entropy(), s->gini(), s->max_over_mean(),
      s->min_over_mean());
  std::printf("tokens per expert: [%s]\n",
              absl::StrJoin(s->tokens_per_expert(), ", ").c_str());
  if (s->rows_per_worker_size() > 0) {
    std::printf("rows per worker: [%s], per step max/mean %.3f\n",
                absl::StrJoin(s->rows_per_worker(), ", ").c_str(),
                s->worker_max_over_mean());
  }
  if (s->replicas_per_expert_size() > 0) {
    std::printf("replicas per expert: [%s]\n",
                absl::StrJoin(s->replicas_per_expert(), ", ").c_str());
  }
  const std::string save = absl::GetFlag(FLAGS_save);
  if (!save.empty()) {
    if (absl::Status st = SaveStats(client, save); !st.ok()) return Fail(st);
  }
  return 0;
}

// The placement in force: the logical expert in each slot of each worker,
// per MoE layer, as `--expert-placement` JSON (empty layers: contiguous).
int Placement(MoeClient& client) {
  auto info = client.GetModelInfo(Timeout());
  if (!info.ok()) return Fail(info.status());
  std::vector<std::string> layers;
  int64_t slots = 0;
  for (int32_t layer : info->moe_layers()) {
    auto s = client.GetExpertStats(layer, false, Timeout());
    if (!s.ok()) return Fail(s.status());
    std::vector<std::string> workers;
    slots = 0;
    for (const auto& w : s->placement()) {
      workers.push_back(
          absl::StrCat("[", absl::StrJoin(w.experts(), ","), "]"));
      slots += w.experts_size();
    }
    if (workers.empty()) continue;
    layers.push_back(
        absl::StrCat("\"", layer, "\": [", absl::StrJoin(workers, ", "), "]"));
  }
  if (layers.empty()) {
    std::printf("{\"redundant_experts\": 0, \"layers\": {}}\n");
    std::fprintf(stderr,
                 "moe-cli: no placement: experts in contiguous ranges over "
                 "%d workers\n",
                 info->num_workers());
    return 0;
  }
  std::printf("{\"redundant_experts\": %ld, \"layers\": {%s}}\n",
              static_cast<long>(slots - info->experts()),
              absl::StrJoin(layers, ", ").c_str());
  return 0;
}

int Rebalance(MoeClient& client) {
  auto r = client.Rebalance(Timeout());
  if (!r.ok()) return Fail(r.status());
  std::printf("placement %lu in force after %.3f s\n",
              static_cast<unsigned long>(r->epoch()), r->seconds());
  return 0;
}

// With --wait, asks again every 0.1 s (over a channel that reconnects
// within 0.25 s) until SERVING or the wait is over; then the last answer.
// An attempt cut short by the end of the wait that runs out of time says
// nothing about the service, so the answer before it stands (a stopped
// service is UNAVAILABLE, not a deadline of our own making).
int Health(MoeClient& client) {
  const absl::Time until = absl::Now() + absl::GetFlag(FLAGS_wait);
  auto h = client.Health(absl::GetFlag(FLAGS_service), Timeout());
  while (!(h.ok() && *h) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(100));
    const auto left = absl::ToChronoMilliseconds(until - absl::Now());
    const auto timeout =
        std::clamp(left, std::chrono::milliseconds(1), Timeout());
    auto next = client.Health(absl::GetFlag(FLAGS_service), timeout);
    if (!next.ok() && absl::IsDeadlineExceeded(next.status()) &&
        timeout < Timeout()) {
      break;
    }
    h = std::move(next);
  }
  if (!h.ok()) return Fail(h.status());
  std::printf("%s\n", *h ? "SERVING" : "NOT_SERVING");
  return *h ? 0 : 1;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  const std::vector<std::string> rest = moe::ParseFlagsOrExit(
      argc, argv,
      "moe-cli forward|info|stats|placement|rebalance|health --target "
      "HOST:PORT "
      "[...]\n"
      "  forward --layer L (--input IN.safetensors | --random N [--seed S]) "
      "[--output OUT.safetensors] [--input-tensor x] [--dtype f32|bf16|f16] "
      "[--timeout-ms T] [--routing] [--timing] [--token-ids 1,2,...|random] "
      "[--routing-file F | --router-logits-file F] "
      "[--shared add|separate|skip] [--return-router-logits]\n"
      "  info\n"
      "  stats --layer L [--reset] [--save FILE.json]\n  placement\n  "
      "rebalance\n"
      "  health [--service NAME] [--wait 60s]");
  if (rest.size() != 2) {
    std::fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return moe::kExitUsage;
  }
  const std::string cmd = rest[1];
  auto opts = moe::MakeClientOptions(
      absl::GetFlag(FLAGS_target), absl::GetFlag(FLAGS_tls_ca),
      absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
      absl::GetFlag(FLAGS_tls_server_name),
      absl::GetFlag(FLAGS_auth_token_file));
  if (!opts.ok()) {
    std::fprintf(stderr, "moe-cli: %s\n",
                 std::string(opts.status().message()).c_str());
    return moe::kExitUsage;
  }
  // Waiting for health, reconnect soon after the service starts listening.
  if (cmd == "health" && absl::GetFlag(FLAGS_wait) > absl::ZeroDuration()) {
    opts->max_reconnect_backoff_ms = 250;
  }
  moe::MoeClient client(*opts);
  if (cmd == "forward") return moe::Forward(client);
  if (cmd == "info") return moe::Info(client);
  if (cmd == "stats") return moe::Stats(client);
  if (cmd == "placement") return moe::Placement(client);
  if (cmd == "rebalance") return moe::Rebalance(client);
  if (cmd == "health") return moe::Health(client);
  std::fprintf(stderr, "moe-cli: unknown command '%s'\n", cmd.c_str());
  return moe::kExitUsage;
}
