#include "client/moe_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/connection_hints.h"
#include "proto/credentials.h"
#include "proto/tensor_codec.h"

namespace moe {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

absl::StatusOr<ClientOptions> MakeClientOptions(const std::string& target,
                                                const std::string& tls_ca,
                                                const std::string& tls_cert,
                                                const std::string& tls_key,
                                                const std::string& server_name,
                                                const std::string& token_file) {
  ClientOptions o;
  o.target = target;
  o.server_name = server_name;
  const TlsFiles tls{tls_cert, tls_key, tls_ca};
  MOE_ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(tls));
  // Null for plaintext: MoeClient then hints at TLS when a port closes on
  // it.
  if (!tls.empty()) o.credentials = std::move(credentials);
  if (!token_file.empty()) {
    MOE_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                         ReadTokenFile(token_file));
    o.auth_token = tokens.front();
  }
  return o;
}

const char kRetryServiceConfig[] = R"json({
  "methodConfig": [{
    "name": [{"service": "moe.v1.MoeService"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
})json";

MoeClient::MoeClient(const ClientOptions& options)
    : auth_token_(options.auth_token),
      plaintext_(options.credentials == nullptr) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.retry) {
    args.SetServiceConfigJSON(kRetryServiceConfig);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
    args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, 16 << 20);
  } else {
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  }
  if (!options.server_name.empty()) {
    args.SetSslTargetNameOverride(options.server_name);
  }
  if (options.max_reconnect_backoff_ms > 0) {
    const int ms = options.max_reconnect_backoff_ms;
    // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC takes it as the connect
    // timeout too, and a TLS handshake on a busy machine outlasts 0.1 s.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(ms, 100));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, ms);
  }
  channel_ = grpc::CreateCustomChannel(options.target,
                                       options.credentials
                                           ? options.credentials
                                           : grpc::InsecureChannelCredentials(),
                                       args);
  stub_ = moe::v1::MoeService::NewStub(channel_);
}

absl::Status MoeClient::Failed(const grpc::Status& s) const {
  absl::Status status = FromGrpc(s);
  if (!plaintext_) return status;
  // A TLS port closes a plaintext connection without a word: gRPC says only
  // "Socket closed".
  const std::string hint =
      PlaintextRefusalHint(status.code(), status.message());
  if (hint.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), hint));
}

void MoeClient::Prepare(grpc::ClientContext* ctx,
                        std::chrono::milliseconds timeout) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!auth_token_.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + auth_token_);
  }
}

absl::StatusOr<ForwardResult> MoeClient::Forward(
    int32_t layer, const float* x, int64_t tokens, int64_t hidden,
    const ForwardOptions& options) {
  moe::v1::ForwardRequest req;
  req.set_layer(layer);
  EncodeMatrix(x, tokens, hidden, options.dtype, req.mutable_hidden_states());
  req.set_return_routing(options.routing);
  req.mutable_token_ids()->Add(options.token_ids.begin(),
                               options.token_ids.end());
  req.mutable_token_types()->Add(options.token_types.begin(),
                                 options.token_types.end());
  req.set_return_timing(options.timing);
  if (options.routing_slots > 0) {
    moe::v1::Routing* r = req.mutable_routing();
    r->set_tokens(tokens);
    r->set_slots(options.routing_slots);
    r->mutable_expert_ids()->Add(options.routing_expert_ids.begin(),
                                 options.routing_expert_ids.end());
    r->mutable_weights()->Add(options.routing_weights.begin(),
                              options.routing_weights.end());
  }
  if (!options.router_logits.empty() || options.router_logits_experts > 0) {
    EncodeMatrix(options.router_logits.data(), tokens,
                 options.router_logits_experts, options.router_logits_dtype,
                 req.mutable_router_logits());
  }
  req.set_return_router_logits(options.return_router_logits);
  req.set_shared(options.shared);
  moe::v1::ForwardResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, options.timeout);
  const grpc::Status s = stub_->Forward(&ctx, req, &resp);
  if (!s.ok()) return Failed(s);
  MOE_ASSIGN_OR_RETURN(auto y, DecodeMatrix(resp.output(), "output", -1,
                                            /*require_finite=*/false));
  ForwardResult r;
  r.tokens = y.rows;
  r.hidden = y.cols;
  r.y = std::move(y.data);
  if (resp.has_routing()) {
    r.slots = resp.routing().slots();
    r.expert_ids.assign(resp.routing().expert_ids().begin(),
                        resp.routing().expert_ids().end());
    r.weights.assign(resp.routing().weights().begin(),
                     resp.routing().weights().end());
  }
  r.timing = resp.timing();
  if (resp.has_router_logits()) {
    MOE_ASSIGN_OR_RETURN(auto logits,
                         DecodeMatrix(resp.router_logits(), "router_logits", -1,
                                      /*require_finite=*/false));
    r.router_logits = std::move(logits.data);
  }
  if (resp.has_shared_output()) {
    MOE_ASSIGN_OR_RETURN(auto shared,
                         DecodeMatrix(resp.shared_output(), "shared_output", -1,
                                      /*require_finite=*/false));
    r.shared_output = std::move(shared.data);
  }
  return r;
}

absl::StatusOr<moe::v1::ModelInfo> MoeClient::GetModelInfo(
    std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  moe::v1::ModelInfo info;
  const grpc::Status s =
      stub_->GetModelInfo(&ctx, moe::v1::GetModelInfoRequest(), &info);
  if (!s.ok()) return Failed(s);
  return info;
}

absl::StatusOr<moe::v1::ExpertStats> MoeClient::GetExpertStats(
    int32_t layer, bool reset, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  moe::v1::GetExpertStatsRequest req;
  req.set_layer(layer);
  req.set_reset(reset);
  moe::v1::ExpertStats stats;
  const grpc::Status s = stub_->GetExpertStats(&ctx, req, &stats);
  if (!s.ok()) return Failed(s);
  return stats;
}

absl::StatusOr<moe::v1::RebalanceResponse> MoeClient::Rebalance(
    std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  moe::v1::RebalanceResponse resp;
  const grpc::Status s =
      stub_->Rebalance(&ctx, moe::v1::RebalanceRequest(), &resp);
  if (!s.ok()) return Failed(s);
  return resp;
}

absl::StatusOr<bool> MoeClient::Health(const std::string& service,
                                       std::chrono::milliseconds timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return Failed(s);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace moe
