#include "engine/device_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

absl::Status DeviceBackend::Reserve(DeviceStepQueue::Memory where, size_t bytes,
                                    Block* block) {
  block->reset();
  if (bytes == 0) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(*block, device_queue().Allocate(where, bytes));
  return absl::OkStatus();
}

absl::Status DeviceBackend::ReserveIo(bool with_gate) {
  using Memory = DeviceStepQueue::Memory;
  const MoeLayerConfig& c = config_;
  bounds_ = StepBounds(c, max_tokens_, max_tokens_);
  const size_t T = max_tokens_, H = c.hidden, R = bounds_.rows,
               S = max_tokens_ * bounds_.slots;
  // The layer's rows (x, the shared expert) are H wide, the step's (its
  // input and output) expert_width(): LatentMoE's latent width on a worker.
  const size_t rows_bytes = T * H * 4;
  const size_t any_rows_bytes = T * std::max<size_t>(H, c.expert_width()) * 4;
  MOE_RETURN_IF_ERROR(Reserve(Memory::kDevice, any_rows_bytes, &x_dev_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kDevice, rows_bytes / 2, &x16_dev_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, any_rows_bytes, &x_pin_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kDevice, any_rows_bytes, &y_dev_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, any_rows_bytes, &y_pin_));
  const bool shared = with_gate && c.has_shared();
  MOE_RETURN_IF_ERROR(
      Reserve(Memory::kDevice, shared ? rows_bytes : 0, &shared_dev_));
  // The routing's answer: top-k ids and weights, or the logits.
  const size_t route_bytes =
      with_gate ? std::max<size_t>(T * c.top_k * 8, T * c.num_experts * 4) : 0;
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, route_bytes, &route_pin_));
  // src_row, scale, grouped, out_row [R] each; slot_row, weights [S] each.
  const size_t index_bytes = (4 * R + 2 * S) * 4;
  MOE_RETURN_IF_ERROR(Reserve(Memory::kDevice, index_bytes, &index_dev_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, index_bytes, &index_pin_));
  char* d = static_cast<char*>(index_dev_.get());
  indices_.src_row = reinterpret_cast<int32_t*>(d);
  indices_.scale = reinterpret_cast<float*>(d + R * 4);
  indices_.grouped = reinterpret_cast<int32_t*>(d + 2 * R * 4);
  indices_.out_row = reinterpret_cast<int32_t*>(d + 3 * R * 4);
  indices_.slot_row = reinterpret_cast<int32_t*>(d + 4 * R * 4);
  indices_.weights = reinterpret_cast<float*>(d + (4 * R + S) * 4);
  stage_send_.reset();
  stage_recv_.reset();
  for (int i = 0; i < kNumEpBuffers; ++i) {
    SetBuffer(static_cast<EpBuffer>(i), nullptr);
  }
  resident_x_ = nullptr;
  resident_n_ = -1;
  x_pin_queued_at_ = -1;
  shared_layer_ = -1;
  return absl::OkStatus();
}

absl::Status DeviceBackend::UploadX(const float* x, int64_t n, int64_t width) {
  if (n > max_tokens_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        n, " tokens exceed the ", max_tokens_, " ", name(), " was sized for"));
  }
  const size_t bytes = n * width * 4;
  if (bytes > 0) {
    if (x != x_pin_.get()) {
      MOE_RETURN_IF_ERROR(FreeXStaging());
      std::memcpy(x_pin_.get(), x, bytes);
    }
    MOE_RETURN_IF_ERROR(
        device_queue().CopyFromHost(x_pin_.get(), x_dev_.get(), bytes));
    x_pin_queued_at_ = device_queue().waits();
  }
  resident_x_ = x;
  resident_n_ = n;
  return absl::OkStatus();
}

absl::Status DeviceBackend::FreeXStaging() {
  DeviceStepQueue& q = device_queue();
  if (x_pin_queued_at_ >= 0 && q.waits() == x_pin_queued_at_) {
    MOE_RETURN_IF_ERROR(q.Synchronize());
  }
  x_pin_queued_at_ = -1;
  return absl::OkStatus();
}

absl::Status DeviceBackend::UploadBf16X(const uint16_t* x, int64_t n) {
  if (n > max_tokens_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        n, " tokens exceed the ", max_tokens_, " ", name(), " was sized for"));
  }
  const int64_t count = n * config_.hidden;
  if (count > 0) {
    if (x != x_pin_.get()) {
      MOE_RETURN_IF_ERROR(FreeXStaging());
      std::memcpy(x_pin_.get(), x, count * 2);
    }
    MOE_RETURN_IF_ERROR(
        device_queue().CopyFromHost(x_pin_.get(), x16_dev_.get(), count * 2));
    x_pin_queued_at_ = device_queue().waits();
    MOE_RETURN_IF_ERROR(QueueWiden(static_cast<uint16_t*>(x16_dev_.get()),
                                   count, static_cast<float*>(x_dev_.get())));
  }
  resident_x_ = x;
  resident_n_ = n;
  return absl::OkStatus();
}

absl::Status DeviceBackend::Route(int64_t layer, const float* x, int64_t n,
                                  absl::Span<const int64_t> segment_ends,
                                  Routing* routing) {
  return RouteTokens(layer, x, {.n = n, .segment_ends = segment_ends}, routing);
}

absl::Status DeviceBackend::RouteTokens(int64_t layer, const float* x,
                                        const RouteRows& rows,
                                        Routing* routing) {
  shared_layer_ = -1;  // new rows: a pending shared expert was of others
  if (route_pin_ == nullptr) {
    return absl::FailedPreconditionError(
        "this backend was loaded without the router's gate");
  }
  if (RoutesOnHost(config_)) return RouteOnHost(layer, x, rows, routing);
  absl::Status s = UploadX(x, rows.n, config_.hidden);
  if (s.ok()) return RouteResident(layer, rows, routing);
  (void)device_queue().Synchronize();  // the staging is free again
  resident_x_ = nullptr;
  resident_n_ = -1;
  return s;
}

absl::StatusOr<bool> DeviceBackend::RouteTokensBf16(int64_t layer,
                                                    const uint16_t* x,
                                                    const RouteRows& rows,
                                                    Routing* routing) {
  shared_layer_ = -1;
  // The experts' frame and the host's routing read the host's fp32 rows
  // (engine/expert_frame.h, TokenRouter): the caller widens them instead.
  if (config_.has_expert_frame() || RoutesOnHost(config_) ||
      host_parts_->count(layer) > 0) {
    return false;
  }
  if (route_pin_ == nullptr) {
    return absl::FailedPreconditionError(
        "this backend was loaded without the router's gate");
  }
  absl::Status s = UploadBf16X(x, rows.n);
  if (s.ok()) s = RouteResident(layer, rows, routing);
  if (!s.ok()) {
    (void)device_queue().Synchronize();
    resident_x_ = nullptr;
    resident_n_ = -1;
    return s;
  }
  return true;
}

absl::Status DeviceBackend::RouteOnHost(int64_t layer, const float* x,
                                        const RouteRows& rows,
                                        Routing* routing) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, FindHostPart(layer));
  MOE_RETURN_IF_ERROR(host_router_.Route(*w, x, rows, host_threads_, routing));
  // A framed layer's step uploads the frame's rows, and its shared expert
  // uploads its own (Shared): nothing of x is read on the device yet.
  resident_x_ = nullptr;
  resident_n_ = -1;
  if (config_.has_expert_frame()) return absl::OkStatus();
  // The step and its shared expert read x resident: it goes up once, and
  // the step's end (or Shared's wait) frees the staging.
  absl::Status s = UploadX(x, rows.n, config_.hidden);
  if (!s.ok()) {
    (void)device_queue().Synchronize();
    resident_x_ = nullptr;
    resident_n_ = -1;
  }
  return s;
}

absl::Status DeviceBackend::RouteResident(int64_t layer, const RouteRows& rows,
                                          Routing* routing) {
  const int64_t n = rows.n;
  const CallerOverrides* caller = rows.caller;
  DeviceStepQueue& q = device_queue();
  DeviceRouteAnswer a;
  // Caller logits are scored, and kept logits answered, by the host's
  // routing: the device then brings its logits home.
  const bool caller_logits =
      caller != nullptr &&
      std::any_of(caller->route.begin(), caller->route.end(),
                  [](RouteSource s) { return s == RouteSource::kLogits; });
  const DeviceRouteQuery query{
      .layer = layer,
      .n = n,
      .token_ids = rows.token_ids,
      .host_logits =
          caller_logits || (caller != nullptr && caller->keep_logits)};
  absl::Status s = QueueRoute(query, &a);
  const int64_t k = config_.top_k, E = config_.num_experts;
  char* pin = static_cast<char*>(route_pin_.get());
  if (s.ok() && n > 0) {
    if (a.logits != nullptr) {
      s = q.Download(a.logits, pin, n * E * 4);
    } else {
      s = q.Download(a.idx, pin, n * k * 4);
      if (s.ok()) s = q.Download(a.weights, pin + n * k * 4, n * k * 4);
    }
  }
  // The one wait of the routing (on failure too: the upload may still be
  // reading the staging).
  const absl::Status waited = q.Synchronize();
  if (!s.ok() || !waited.ok()) {
    resident_x_ = nullptr;
    resident_n_ = -1;
    return s.ok() ? waited : s;
  }
  if (a.logits != nullptr) {
    return RouteLogits(layer, reinterpret_cast<const float*>(pin), rows,
                       routing);
  }
  if (query.host_logits) {
    return absl::InternalError(
        "the device routing left no logits although they were asked for");
  }
  // The device chose the slots itself (token choice without a capacity
  // limit); the caller's routing replaces its rows exactly.
  // Token choice without a capacity limit: every slot dispatched.
  routing->Reset(n, k, E);
  if (n > 0) {
    std::memcpy(routing->expert.data(), pin, n * k * 4);
    std::memcpy(routing->weight.data(), pin + n * k * 4, n * k * 4);
  }
  std::fill(routing->dispatched.begin(), routing->dispatched.end(), uint8_t{1});
  for (int32_t e : routing->expert) {
    if (e < 0 || e >= E) {
      return absl::InternalError(
          absl::StrCat("the device routed a token to expert ", e, " of ", E));
    }
    ++routing->expert_counts[e];
  }
  if (AnyCallerRoute(caller)) {
    ApplyCallerRouting(*caller, rows.segment_ends, routing);
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::Shared(int64_t layer, const float* x, int64_t n,
                                   float* out) {
  MOE_RETURN_IF_ERROR(CheckShared(layer));
  if (n == 0) return absl::OkStatus();
  if (shared_dev_ == nullptr) {
    return absl::FailedPreconditionError(
        "this backend was loaded without the router's gate");
  }
  DeviceStepQueue& q = device_queue();
  const int64_t H = config_.hidden;
  const LayerWeights* norms = nullptr;
  if (config_.branch_norms) {
    // Gemma 4's dense branch reads rms(x) * its pre-norm weight: normed on
    // the host straight into the staging, which then goes up as it is.
    MOE_ASSIGN_OR_RETURN(norms, FindHostPart(layer));
    if (norms->shared_in_norm.empty() || norms->shared_out_norm.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "layer ", layer, " was loaded without its shared expert's norms"));
    }
    if (n > max_tokens_) return UploadX(x, n, H);  // the size's error
    MOE_RETURN_IF_ERROR(FreeXStaging());
    float* staged = static_cast<float*>(x_pin_.get());
    RmsNormRows(x, n, H, config_.norm_eps, norms->shared_in_norm.data(), 1.0f,
                staged);
    MOE_RETURN_IF_ERROR(UploadX(staged, n, H));
  } else if (x != resident_x_ || n != resident_n_) {
    MOE_RETURN_IF_ERROR(UploadX(x, n, H));
  }
  const size_t bytes = n * H * 4;
  absl::Status s =
      QueueShared(layer, n, static_cast<float*>(shared_dev_.get()));
  if (s.ok()) s = q.Download(shared_dev_.get(), y_pin_.get(), bytes);
  const absl::Status waited = q.Synchronize();
  MOE_RETURN_IF_ERROR(s);
  MOE_RETURN_IF_ERROR(waited);
  const float* home = static_cast<const float*>(y_pin_.get());
  if (norms != nullptr) {
    RmsNormRows(home, n, H, config_.norm_eps, norms->shared_out_norm.data(),
                1.0f, out);
  } else {
    std::memcpy(out, home, bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DeviceBackend::AddSharedToStep(int64_t layer) {
  MOE_RETURN_IF_ERROR(CheckShared(layer));
  if (config_.branch_norms) return false;
  if (shared_dev_ == nullptr || resident_x_ == nullptr) {
    return absl::FailedPreconditionError(
        "the shared expert joins a step only after Route, on a backend "
        "loaded with the router's gate");
  }
  shared_layer_ = layer;
  return true;
}

absl::Status DeviceBackend::Prepare(const EpPlan& p) {
  if (p.tokens > bounds_.tokens || p.sent > bounds_.rows ||
      p.arrived > bounds_.rows || p.received > bounds_.rows ||
      p.home > bounds_.rows || p.slots > bounds_.slots) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a step of ", p.tokens, " tokens (", p.sent, " rows out, ",
                     p.received, " in) exceeds the workspaces of ", name(),
                     " sized for ", max_tokens_, " tokens"));
  }
  return PrepareStep(p);
}

absl::Status DeviceBackend::Gather(const EpStepInput& in, const EpPlan& p,
                                   bool x_resident,
                                   const RowTransport& /*the gather also
                                                        converts to bf16*/) {
  DeviceStepQueue& q = device_queue();
  const int64_t num_slots = p.tokens * p.slots, R = bounds_.rows;
  const int64_t S = max_tokens_ * bounds_.slots;
  if (!x_resident || in.rows != resident_x_ || in.tokens != resident_n_) {
    MOE_RETURN_IF_ERROR(UploadX(in.rows, in.tokens, config_.expert_width()));
  }
  // The plan's index arrays through pinned staging, one upload each. The
  // previous step finished (Finish or Drain) before this one began, so the
  // staging is free.
  int32_t* src_row = static_cast<int32_t*>(index_pin_.get());
  float* scale = reinterpret_cast<float*>(src_row + R);
  int32_t* grouped = src_row + 2 * R;
  int32_t* out_row = src_row + 3 * R;
  int32_t* slot_row = src_row + 4 * R;
  float* weights = reinterpret_cast<float*>(src_row + 4 * R + S);
  for (int64_t j = 0; j < p.sent; ++j) {
    src_row[j] = static_cast<int32_t>(p.src_row[j]);
  }
  // Scaled rows travel one per slot (EpPlan), in `order`.
  const bool scaled = config_.score_before_experts;
  if (scaled) {
    for (int64_t j = 0; j < p.sent; ++j) scale[j] = in.weights[p.order[j]];
  }
  // A dispatched row may feed several grouped rows (one per slot of its
  // token here): grouped is then no permutation, and the regroup gathers.
  grouped_identity_ = p.arrived == p.received;
  out_identity_ = true;
  for (int64_t i = 0; i < p.received; ++i) {
    grouped[i] = static_cast<int32_t>(p.grouped[i]);
    out_row[i] = static_cast<int32_t>(p.out_row[i]);
    grouped_identity_ = grouped_identity_ && p.grouped[i] == i;
    out_identity_ = out_identity_ && p.out_row[i] == i;
  }
  for (int64_t i = 0; i < num_slots; ++i) {
    slot_row[i] = static_cast<int32_t>(p.slot_row[i]);
  }
  if (num_slots > 0) std::memcpy(weights, in.weights.data(), num_slots * 4);
  const DeviceStepIndices& d = indices_;
  auto up = [&](void* dev, const void* host, int64_t bytes) {
    return bytes > 0 ? q.CopyFromHost(host, dev, bytes) : absl::OkStatus();
  };
  MOE_RETURN_IF_ERROR(up(d.src_row, src_row, p.sent * 4));
  if (scaled) MOE_RETURN_IF_ERROR(up(d.scale, scale, p.sent * 4));
  MOE_RETURN_IF_ERROR(up(d.grouped, grouped, p.received * 4));
  MOE_RETURN_IF_ERROR(up(d.out_row, out_row, p.received * 4));
  MOE_RETURN_IF_ERROR(up(d.slot_row, slot_row, num_slots * 4));
  MOE_RETURN_IF_ERROR(up(d.weights, weights, num_slots * 4));
  return QueueGather(p, scaled);
}

absl::Status DeviceBackend::Combine(const EpStepInput& in, const EpPlan& p,
                                    const void* back, float* y) {
  float* y_dev = static_cast<float*>(y_dev_.get());
  MOE_RETURN_IF_ERROR(QueueCombine(p, back, y_dev));
  if (shared_layer_ >= 0) {
    const int64_t layer = shared_layer_;
    shared_layer_ = -1;
    if (in.rows != resident_x_ || p.tokens != resident_n_) {
      return absl::FailedPreconditionError(
          "the shared expert was asked for rows other than the step's");
    }
    // y = sum of the routed experts + the gated shared expert, the CPU's
    // order of additions, without the shared expert's rows leaving the
    // device.
    float* shared = static_cast<float*>(shared_dev_.get());
    MOE_RETURN_IF_ERROR(QueueShared(layer, p.tokens, shared));
    MOE_RETURN_IF_ERROR(QueueAdd(y_dev, shared, p.tokens));
  }
  const size_t bytes = p.tokens * config_.expert_width() * 4;
  if (bytes > 0) {
    MOE_RETURN_IF_ERROR(device_queue().Download(y_dev, y_pin_.get(), bytes));
  }
  device_queue().CopyAtFinish(y_pin_.get(), y, bytes);
  return absl::OkStatus();
}

absl::Status DeviceBackend::LoadHostParts(const ModelSource& source,
                                          const LoadOptions& options) {
  auto parts = std::make_shared<HostParts>();
  LoadOptions o = options;
  o.load_gate = true;  // the frame's tensors and the scales are the router's
  o.load_shared = false;
  o.expert_begin = 0;
  o.expert_end = 0;
  o.layer_experts.clear();
  for (int64_t layer : source.info().moe_layers) {
    if (options.only_layer >= 0 && layer != options.only_layer) continue;
    const MoeLayerConfig& c = source.info().LayerConfig(layer);
    if (!NeedsHostParts(c)) continue;
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<LayerWeights> w,
                         LoadLayerWeights(source, layer, o));
    MOE_RETURN_IF_ERROR(CheckFrameLoaded(*w));
    if (c.branch_norms && c.has_shared() && options.load_shared) {
      // The shared expert's norms, without the expert (the device's).
      MOE_ASSIGN_OR_RETURN(
          w->shared_in_norm,
          LoadWeightVector(source, layer, WeightRole::kSharedInNorm));
      MOE_ASSIGN_OR_RETURN(
          w->shared_out_norm,
          LoadWeightVector(source, layer, WeightRole::kSharedOutNorm));
    }
    (*parts)[layer] = std::move(w);
  }
  host_parts_ = std::move(parts);
  host_threads_ = std::max(options.num_threads, 1);
  return absl::OkStatus();
}

absl::StatusOr<const LayerWeights*> DeviceBackend::FindHostPart(
    int64_t layer) const {
  auto it = host_parts_->find(layer);
  if (it == host_parts_->end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), " holds no host copy of layer ", layer,
                     "'s router part (loaded without the router's gate)"));
  }
  return it->second.get();
}

const float* DeviceBackend::OutputBias(int64_t layer) const {
  auto it = host_parts_->find(layer);
  if (it == host_parts_->end() || it->second->output_bias.empty()) {
    return nullptr;
  }
  return it->second->output_bias.data();
}

absl::StatusOr<const float*> DeviceBackend::EnterExperts(int64_t layer,
                                                         const float* x,
                                                         int64_t n) {
  if (!config_.has_expert_frame()) return x;
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, FindHostPart(layer));
  return frame_.Enter(*w, x, n, host_threads_);
}

absl::Status DeviceBackend::LeaveExperts(int64_t layer, float* s, int64_t n,
                                         float* y) {
  MOE_ASSIGN_OR_RETURN(const LayerWeights* w, FindHostPart(layer));
  return frame_.Leave(*w, s, n, y, host_threads_);
}

void DeviceBackend::AdoptHostLogic(DeviceBackend& from) {
  using std::swap;
  swap(config_, from.config_);
  swap(max_tokens_, from.max_tokens_);
  swap(bounds_, from.bounds_);
  swap(grouped_identity_, from.grouped_identity_);
  swap(out_identity_, from.out_identity_);
  swap(x_dev_, from.x_dev_);
  swap(x16_dev_, from.x16_dev_);
  swap(x_pin_, from.x_pin_);
  swap(y_dev_, from.y_dev_);
  swap(y_pin_, from.y_pin_);
  swap(shared_dev_, from.shared_dev_);
  swap(route_pin_, from.route_pin_);
  swap(index_dev_, from.index_dev_);
  swap(index_pin_, from.index_pin_);
  swap(stage_send_, from.stage_send_);
  swap(stage_recv_, from.stage_recv_);
  swap(indices_, from.indices_);
  swap(resident_x_, from.resident_x_);
  swap(resident_n_, from.resident_n_);
  swap(x_pin_queued_at_, from.x_pin_queued_at_);
  swap(shared_layer_, from.shared_layer_);
  swap(host_parts_, from.host_parts_);
  swap(host_threads_, from.host_threads_);
  for (int i = 0; i < kNumEpBuffers; ++i) {
    const EpBuffer which = static_cast<EpBuffer>(i);
    void* mine = buffer(which);
    SetBuffer(which, from.buffer(which));
    from.SetBuffer(which, mine);
  }
}

absl::Status DeviceBackend::ReserveStaging() {
  if (stage_send_ != nullptr || bounds_.rows == 0) return absl::OkStatus();
  const size_t bytes = bounds_.rows * config_.expert_width() * 2;
  using Memory = DeviceStepQueue::Memory;
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, bytes, &stage_send_));
  MOE_RETURN_IF_ERROR(Reserve(Memory::kPinnedHost, bytes, &stage_recv_));
  SetBuffer(EpBuffer::kStageSend, stage_send_.get());
  SetBuffer(EpBuffer::kStageRecv, stage_recv_.get());
  return absl::OkStatus();
}

}  // namespace moe
