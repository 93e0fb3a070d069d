#include "server/api/worker_control_service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/encoded_step.h"
#include "proto/step_codec.h"  // ViewStepResult
#include "server/api/rpc_edge.h"

namespace moe {
namespace {

using JoinStream =
    grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>;

// Writes rank `rank`'s expert slots of every layer of `placement` into `out`
// (an Assignment's or a PlacementUpdate's layer_slots).
void AddLayerSlots(
    const ExpertPlacement& placement, int rank,
    google::protobuf::RepeatedPtrField<moe::v1::LayerSlots>* out) {
  for (const auto& [layer, lp] : placement.layers) {
    auto* slots = out->Add();
    slots->set_layer(static_cast<int32_t>(layer));
    slots->mutable_experts()->Assign(lp.workers[rank].begin(),
                                     lp.workers[rank].end());
  }
}

WorkerRegistration RegistrationOf(const moe::v1::Register& r) {
  return {.host = r.host(),
          .pid = r.pid(),
          .device = r.device(),
          .collective_host = r.collective_host(),
          .device_identity = r.device_identity(),
          .shares_device = r.shares_device()};
}

}  // namespace

// Represents one Join stream as a member of the group: it writes one message at
// a time, and none after the stream ended.
class WorkerControlService::Stream final : public GroupMember {
 public:
  Stream(JoinStream* stream, const moe::v1::Register& r,
         const WorkerControlOptions* options)
      : GroupMember(RegistrationOf(r), r.threads()),
        stream_(stream),
        options_(options) {}

  bool Write(const EncodedStep& step) override {
    return WriteMessage(step.message());
  }
  bool Assign(const GroupAssignment& a) override {
    return WriteMessage(EncodeAssignment(a, *options_));
  }
  bool SendPlacement(const PlacementUpdate& u) override {
    return WriteMessage(EncodePlacement(u));
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }

 private:
  bool WriteMessage(const moe::v1::RouterMessage& m) {
    absl::MutexLock lock(&mu_);
    return open_ && stream_->Write(m);
  }

  JoinStream* const stream_;
  const WorkerControlOptions* const options_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
};

// Holds one parked StoreGet as the call's reactor, which deletes itself when
// the call is done.
class WorkerControlService::StoreWait : public grpc::ServerUnaryReactor,
                                        public StoreWaiter {
 public:
  StoreWait(RendezvousStore* store, moe::v1::StoreGetResponse* resp)
      : store_(store), resp_(resp) {}
  void OnCancel() override { store_->Cancel(this); }
  void OnDone() override { delete this; }
  void End(const absl::Status& status,
           std::vector<std::string> values) override {
    for (std::string& v : values) resp_->add_values(std::move(v));
    Finish(ToGrpcStatus(status));
  }

 private:
  RendezvousStore* const store_;
  moe::v1::StoreGetResponse* const resp_;
};

moe::v1::RouterMessage EncodeAssignment(const GroupAssignment& in,
                                        const WorkerControlOptions& options) {
  moe::v1::RouterMessage msg;
  auto* a = msg.mutable_assignment();
  a->set_generation(in.generation);
  a->set_rank(in.rank);
  a->set_world_size(in.world_size);
  a->set_expert_begin(in.expert_begin);
  a->set_expert_end(in.expert_end);
  a->set_placement_epoch(in.placement_epoch);
  if (in.placement != nullptr) {
    a->set_redundant_experts(in.placement->redundant);
    AddLayerSlots(*in.placement, in.rank, a->mutable_layer_slots());
  }
  *a->mutable_model() = options.model;
  a->set_heartbeat_interval_ms(in.heartbeat_interval.count());
  a->set_connect_timeout_ms(options.connect_timeout.count());
  a->set_collective_timeout_ms(options.collective_timeout.count());
  a->set_max_batch_tokens(options.max_batch_tokens);
  a->set_store_token(in.store_token);
  return msg;
}

moe::v1::RouterMessage EncodePlacement(const PlacementUpdate& in) {
  moe::v1::RouterMessage msg;
  auto* u = msg.mutable_placement();
  u->set_generation(in.generation);
  u->set_epoch(in.epoch);
  u->set_redundant_experts(in.placement->redundant);
  AddLayerSlots(*in.placement, in.rank, u->mutable_layer_slots());
  return msg;
}

grpc::Status WorkerControlService::Join(grpc::ServerContext* ctx,
                                        JoinStream* stream) {
  if (auto s = CheckWorkerCall(options_.auth, *ctx, "Join"); !s.ok()) return s;
  moe::v1::WorkerMessage msg;
  if (!stream->Read(&msg) || !msg.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of Join must be Register");
  }
  auto member = std::make_shared<Stream>(stream, msg.register_(), &options_);
  const absl::Status admitted = group_->Admit(member, ctx->peer());
  if (!admitted.ok()) return ToGrpcStatus(admitted);
  while (stream->Read(&msg)) Dispatch(member, msg);
  member->Close();
  group_->Remove(member);
  return grpc::Status::OK;
}

void WorkerControlService::Dispatch(const std::shared_ptr<Stream>& member,
                                    moe::v1::WorkerMessage& msg) {
  group_->Seen(member);  // any message proves it alive
  if (msg.has_ready()) {
    group_->OnReady(member, msg.ready().generation(), msg.ready().error());
  } else if (msg.has_result()) {
    // The reply views the rows where they arrived: the message itself
    // moves (no copy of its bytes) into storage the reply owns.
    auto owned = std::make_shared<moe::v1::StepResult>();
    owned->Swap(msg.mutable_result());
    StepReply reply = ViewStepResult(*owned);
    reply.owner = std::move(owned);
    group_->OnResult(*member, reply);
  } else if (msg.has_placement_loaded()) {
    const moe::v1::PlacementLoaded& loaded = msg.placement_loaded();
    group_->OnPlacementLoaded(*member, loaded.generation(), loaded.epoch(),
                              loaded.error());
  }
}

grpc::ServerUnaryReactor* WorkerControlService::StoreSet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreSetRequest* req,
    moe::v1::StoreSetResponse*) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreSet")) return r;
  auto* reactor = ctx->DefaultReactor();
  const absl::Status status = group_->store().Set(
      req->generation(), req->store_token(), req->key(), req->value());
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerControlService::StoreGet(
    grpc::CallbackServerContext* ctx, const moe::v1::StoreGetRequest* req,
    moe::v1::StoreGetResponse* resp) {
  if (auto* r = RefuseWorkerCall(options_.auth, ctx, "StoreGet")) return r;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::clamp<int64_t>(
                            req->timeout_ms(), 0, int64_t{24} * 3600 * 1000));
  auto* wait = new StoreWait(&group_->store(), resp);
  const absl::Status refused = group_->ParkStoreGet(
      req->generation(), req->store_token(),
      std::vector<std::string>(req->keys().begin(), req->keys().end()),
      deadline, wait);
  if (!refused.ok()) {
    delete wait;  // never parked
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(refused));
    return reactor;
  }
  return wait;
}

}  // namespace moe
