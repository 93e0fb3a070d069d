// C++ client of moe.v1.MoeService (and the standard health service).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "moe/v1/moe.grpc.pb.h"

namespace moe {

struct ClientOptions {
  std::string target;  // host:port
  // Null: plaintext (a call that a TLS port closes then says to pass
  // --tls-ca).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string server_name;  // TLS: name to verify instead of the target's
  std::string auth_token;   // sent as "authorization: Bearer <token>"
  int max_message_bytes = 1 << 30;
  // Retry calls that fail with UNAVAILABLE (a router draining, a worker
  // group regrouping): kRetryServiceConfig. Off: every failure is seen.
  bool retry = true;
  // > 0: reconnect at most this long after a refused connection (gRPC's
  // default backoff grows to 2 minutes), for a client that waits for a
  // service to come up.
  int max_reconnect_backoff_ms = 0;
};

// The channel's service config with `retry`: every moe.v1.MoeService call
// is tried up to 4 times on UNAVAILABLE, with exponential backoff from
// 0.1 s to 1 s (and jitter). A call is retried only before its first
// response arrives and while its request fits the retry buffer (16 MiB).
extern const char kRetryServiceConfig[];

// Options from the command-line spelling shared by the CLIs: TLS when a CA
// or client certificate is given, the first token of `token_file`.
absl::StatusOr<ClientOptions> MakeClientOptions(const std::string& target,
                                                const std::string& tls_ca,
                                                const std::string& tls_cert,
                                                const std::string& tls_key,
                                                const std::string& server_name,
                                                const std::string& token_file);

struct ForwardOptions {
  bool routing = false;
  bool timing = false;
  moe::v1::DType dtype = moe::v1::F32;  // wire dtype of x and y
  std::chrono::milliseconds timeout{30000};
  // One token id per row: required by a hash-routed layer (listed in
  // ModelInfo.hash_layers), ignored by others. Empty: none sent.
  std::vector<int64_t> token_ids;
  // One modality per row (0 text, 1 image, 2 video): required by a layer
  // with vision experts (ModelInfo.vision_layers), ignored by others. Empty:
  // none sent.
  std::vector<int32_t> token_types;
  // Routing from the caller (ForwardRequest.routing): `routing_slots` = the
  // layer's top_k ids and final weights per row; 0: the service routes.
  int32_t routing_slots = 0;
  std::vector<int32_t> routing_expert_ids;  // [tokens * routing_slots]
  std::vector<float> routing_weights;       // [tokens * routing_slots]
  // Gate logits [tokens, experts] from the caller (router_logits), sent in
  // `router_logits_dtype` (F32 or BF16); empty: none.
  std::vector<float> router_logits;
  int64_t router_logits_experts = 0;
  moe::v1::DType router_logits_dtype = moe::v1::F32;
  // Return the gate logits (ForwardResult::router_logits).
  bool return_router_logits = false;
  moe::v1::SharedMode shared = moe::v1::SHARED_ADD;
};

struct ForwardResult {
  int64_t tokens = 0;
  int64_t hidden = 0;
  std::vector<float> y;  // [tokens, hidden]
  int32_t slots = 0;     // routing, when asked
  std::vector<int32_t> expert_ids;
  std::vector<float> weights;
  moe::v1::StageTiming timing;  // when asked
  // [tokens, experts] when return_router_logits.
  std::vector<float> router_logits;
  // [tokens, hidden] with SHARED_SEPARATE.
  std::vector<float> shared_output;
};

class MoeClient {
 public:
  explicit MoeClient(const ClientOptions& options);

  absl::StatusOr<ForwardResult> Forward(int32_t layer, const float* x,
                                        int64_t tokens, int64_t hidden,
                                        const ForwardOptions& options);
  absl::StatusOr<moe::v1::ModelInfo> GetModelInfo(
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  absl::StatusOr<moe::v1::ExpertStats> GetExpertStats(
      int32_t layer, bool reset,
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Live rebalancing of the expert placement on the workers; answers once
  // every worker has switched.
  absl::StatusOr<moe::v1::RebalanceResponse> Rebalance(
      std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // True when the service (or `service`, if not empty) reports SERVING.
  absl::StatusOr<bool> Health(
      const std::string& service = "",
      std::chrono::milliseconds timeout = std::chrono::seconds(5));

  moe::v1::MoeService::Stub* stub() { return stub_.get(); }
  // Sets deadline and credentials metadata on a context for a call.
  void Prepare(grpc::ClientContext* ctx,
               std::chrono::milliseconds timeout) const;

 private:
  // FromGrpc, with a hint at TLS on a plaintext channel that a server
  // closed.
  absl::Status Failed(const grpc::Status& s) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<moe::v1::MoeService::Stub> stub_;
  std::string auth_token_;
  bool plaintext_ = true;
};

// grpc::Status -> absl::Status, same code and message.
absl::Status FromGrpc(const grpc::Status& s);

}  // namespace moe
