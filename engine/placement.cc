#include "engine/placement.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/even_split.h"
#include "nlohmann/json.hpp"

namespace moe {

int64_t LayerPlacement::physical() const {
  int64_t n = 0;
  for (const auto& w : workers) n += static_cast<int64_t>(w.size());
  return n;
}

std::vector<int32_t> LayerPlacement::Flat() const {
  std::vector<int32_t> flat;
  flat.reserve(physical());
  for (const auto& w : workers) flat.insert(flat.end(), w.begin(), w.end());
  return flat;
}

int64_t WorkerSlots(int q, int P, int64_t physical) {
  return SplitBegin(q + 1, P, physical) - SplitBegin(q, P, physical);
}

LayerPlacement ContiguousPlacement(int64_t E, int P) {
  LayerPlacement p;
  p.workers.resize(P);
  for (int q = 0; q < P; ++q) {
    for (int64_t e = SplitBegin(q, P, E); e < SplitBegin(q + 1, P, E); ++e) {
      p.workers[q].push_back(static_cast<int32_t>(e));
    }
  }
  return p;
}

absl::StatusOr<LayerPlacement> ComputePlacement(absl::Span<const double> load,
                                                int P, int64_t R) {
  const int64_t E = static_cast<int64_t>(load.size());
  if (P < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers ", P, " < 1"));
  }
  if (R < 0 || R % P != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redundant experts ", R, " is not a multiple of the ", P, " workers"));
  }
  if (R > 0 && E < P) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redundant experts need at least one expert per worker: ", E,
        " experts, ", P, " workers"));
  }
  double total = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (!(load[e] >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("load of expert ", e, " is ", load[e]));
    }
    total += load[e];
  }
  // No load seen yet: spread the replicas as if every expert were equal.
  std::vector<double> w(load.begin(), load.end());
  if (total <= 0) std::fill(w.begin(), w.end(), 1.0);

  // Replicate: each extra slot to the expert with the most load per replica.
  std::vector<int64_t> copies(E, 1);
  for (int64_t r = 0; r < R; ++r) {
    int64_t best = 0;
    for (int64_t e = 1; e < E; ++e) {
      if (w[e] / copies[e] > w[best] / copies[best]) best = e;
    }
    ++copies[best];
  }

  // Pack: replicas heaviest first (ties: lower expert) onto the least
  // loaded worker with a free slot, avoiding one that already holds it.
  struct Item {
    double weight;
    int32_t expert;
  };
  std::vector<Item> items;
  items.reserve(E + R);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t c = 0; c < copies[e]; ++c) {
      items.push_back({w[e] / copies[e], static_cast<int32_t>(e)});
    }
  }
  std::stable_sort(
      items.begin(), items.end(),
      [](const Item& a, const Item& b) { return a.weight > b.weight; });
  LayerPlacement p;
  p.workers.resize(P);
  std::vector<double> worker_load(P, 0);
  for (const Item& it : items) {
    int best = -1;
    bool best_holds = true;
    for (int q = 0; q < P; ++q) {
      if (static_cast<int64_t>(p.workers[q].size()) >=
          WorkerSlots(q, P, E + R)) {
        continue;
      }
      const auto& held = p.workers[q];
      const bool holds =
          std::find(held.begin(), held.end(), it.expert) != held.end();
      if (best < 0 || (best_holds && !holds) ||
          (holds == best_holds && worker_load[q] < worker_load[best])) {
        best = q;
        best_holds = holds;
      }
    }
    p.workers[best].push_back(it.expert);
    worker_load[best] += it.weight;
  }
  for (auto& slots : p.workers) std::sort(slots.begin(), slots.end());
  return p;
}

absl::Status CheckPlacement(const LayerPlacement& p, int64_t E, int P,
                            int64_t R, int64_t layer) {
  const std::string where = absl::StrCat("placement of layer ", layer, ": ");
  if (p.world() != P) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, p.world(), " workers, expected ", P));
  }
  std::vector<int64_t> held(E, 0);
  for (int q = 0; q < P; ++q) {
    const int64_t want = WorkerSlots(q, P, E + R);
    if (static_cast<int64_t>(p.workers[q].size()) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "worker ", q, " has ", p.workers[q].size(),
                       " slots, expected ", want, " (", E, " experts + ", R,
                       " redundant over ", P, " workers)"));
    }
    for (size_t s = 0; s < p.workers[q].size(); ++s) {
      const int32_t e = p.workers[q][s];
      if (e < 0 || e >= E) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "worker ", q, " slot ", s, " holds expert ", e,
                         ", outside [0, ", E, ")"));
      }
      ++held[e];
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    if (held[e] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expert ", e, " is in no slot"));
    }
  }
  return absl::OkStatus();
}

ReplicaMap MakeReplicaMap(const LayerPlacement& p, int64_t E) {
  ReplicaMap m;
  m.world = p.world();
  const std::vector<int32_t> flat = p.Flat();
  m.physical = static_cast<int64_t>(flat.size());
  m.offsets.assign(E + 1, 0);
  for (int32_t e : flat) ++m.offsets[e + 1];
  std::partial_sum(m.offsets.begin(), m.offsets.end(), m.offsets.begin());
  m.slot.resize(m.physical);
  m.worker_of.resize(m.physical);
  std::vector<int64_t> next(m.offsets.begin(), m.offsets.end() - 1);
  int64_t s = 0;
  for (int q = 0; q < p.world(); ++q) {
    for (int32_t e : p.workers[q]) {
      m.worker_of[s] = q;
      m.slot[next[e]++] = static_cast<int32_t>(s);
      ++s;
    }
  }
  return m;
}

std::string PlacementToJson(const ExpertPlacement& p) {
  nlohmann::json j;
  j["redundant_experts"] = p.redundant;
  nlohmann::json layers = nlohmann::json::object();
  for (const auto& [layer, lp] : p.layers) {
    layers[std::to_string(layer)] = lp.workers;
  }
  j["layers"] = std::move(layers);
  return j.dump();
}

absl::StatusOr<ExpertPlacement> PlacementFromJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("placement: not a JSON object");
  }
  ExpertPlacement p;
  if (j.contains("redundant_experts")) {
    if (!j["redundant_experts"].is_number_integer()) {
      return absl::InvalidArgumentError(
          "placement: redundant_experts is not an integer");
    }
    p.redundant = j["redundant_experts"].get<int64_t>();
  }
  if (!j.contains("layers") || !j["layers"].is_object()) {
    return absl::InvalidArgumentError(
        "placement: \"layers\" must be an object {\"<layer>\": [[...], ...]}");
  }
  for (const auto& [key, workers] : j["layers"].items()) {
    int64_t layer = 0;
    if (!absl::SimpleAtoi(key, &layer) || layer < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement: layer key '", key, "' is not a layer"));
    }
    LayerPlacement lp;
    if (!workers.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: layer ", key, " is not an array of workers"));
    }
    for (const auto& slots : workers) {
      if (!slots.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "placement: layer ", key, ": a worker is not an array of slots"));
      }
      std::vector<int32_t>& out = lp.workers.emplace_back();
      for (const auto& e : slots) {
        if (!e.is_number_integer()) {
          return absl::InvalidArgumentError(
              absl::StrCat("placement: layer ", key, ": slot ", e.dump(),
                           " is not an expert id"));
        }
        out.push_back(e.get<int32_t>());
      }
    }
    p.layers[layer] = std::move(lp);
  }
  return p;
}

}  // namespace moe
