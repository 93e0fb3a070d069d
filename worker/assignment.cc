#include "worker/assignment.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe {
namespace {

void AddSlots(
    const google::protobuf::RepeatedPtrField<moe::v1::LayerSlots>& layers,
    ExpertShard* shard) {
  for (const moe::v1::LayerSlots& l : layers) {
    shard->layer_slots[l.layer()].assign(l.experts().begin(),
                                         l.experts().end());
  }
}

}  // namespace

ExpertShard ShardOf(const moe::v1::Assignment& a) {
  ExpertShard shard;
  shard.begin = a.expert_begin();
  shard.end = a.expert_end();
  shard.redundant = a.redundant_experts();
  AddSlots(a.layer_slots(), &shard);
  return shard;
}

ExpertShard ShardOf(const moe::v1::PlacementUpdate& u) {
  ExpertShard shard;
  shard.redundant = u.redundant_experts();
  AddSlots(u.layer_slots(), &shard);
  return shard;
}

int64_t MaxTokensFor(const moe::v1::Assignment& a, int64_t cap) {
  int64_t max_tokens = a.max_batch_tokens();
  if (cap > 0 && (max_tokens <= 0 || cap < max_tokens)) max_tokens = cap;
  return max_tokens;
}

std::string LoadKeyOf(const moe::v1::Assignment& a, int64_t max_tokens) {
  std::string slots_key;
  for (const moe::v1::LayerSlots& l : a.layer_slots()) {
    absl::StrAppend(&slots_key, l.layer(), ":", absl::StrJoin(l.experts(), ","),
                    ";");
  }
  return absl::StrCat(a.model().SerializeAsString(), "|", a.expert_begin(), "-",
                      a.expert_end(), "|", a.redundant_experts(), "|",
                      slots_key, "|", max_tokens, "|", a.placement_epoch());
}

std::string ShardText(const ExpertShard& shard) {
  if (shard.layer_slots.empty()) {
    return absl::StrCat("[", shard.begin, ", ", shard.end, ")");
  }
  std::string out = "slots";
  for (const auto& [layer, slots] : shard.layer_slots) {
    absl::StrAppend(&out, " ", layer, ":[", absl::StrJoin(slots, ","), "]");
  }
  return out;
}

}  // namespace moe
