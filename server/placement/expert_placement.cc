#include "server/placement/expert_placement.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/step/expert_stats.h"

namespace moe {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& flag,
                                     const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ExpertPlacement>> MakeRouterPlacement(
    const ModelInfo& info, int P, const PlacementFlags& flags) {
  const int64_t E = info.layer.num_experts;
  if (!flags.placement_file.empty()) {
    MOE_ASSIGN_OR_RETURN(std::string text,
                         ReadText("expert-placement", flags.placement_file));
    auto p = PlacementFromJson(text);
    if (!p.ok()) return Prefixed("--expert-placement: ", p.status());
    if (flags.redundant != 0 && flags.redundant != p->redundant) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--expert-placement has redundant_experts ", p->redundant,
          ", --redundant-experts says ", flags.redundant));
    }
    for (int64_t layer : info.moe_layers) {
      auto it = p->layers.find(layer);
      if (it == p->layers.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--expert-placement: no placement for MoE layer ", layer));
      }
      MOE_RETURN_IF_ERROR(
          Prefixed("--expert-placement: ",
                   CheckPlacement(it->second, E, P, p->redundant, layer)));
    }
    for (const auto& [layer, lp] : p->layers) {
      if (!info.HasLayer(layer)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--expert-placement: layer ", layer, " is not an MoE layer"));
      }
    }
    return std::make_shared<const ExpertPlacement>(std::move(*p));
  }
  if (flags.redundant == 0 && flags.load_file.empty()) return nullptr;
  std::map<int64_t, std::vector<double>> load;
  if (!flags.load_file.empty()) {
    MOE_ASSIGN_OR_RETURN(std::string text,
                         ReadText("expert-load", flags.load_file));
    auto l = ExpertLoadFromJson(text);
    if (!l.ok()) return Prefixed("--expert-load: ", l.status());
    load = std::move(*l);
  }
  auto placement = std::make_shared<ExpertPlacement>();
  placement->redundant = flags.redundant;
  for (int64_t layer : info.moe_layers) {
    std::vector<double> even(E, 1.0);
    const std::vector<double>* l = &even;
    if (auto it = load.find(layer); it != load.end()) {
      if (static_cast<int64_t>(it->second.size()) != E) {
        return absl::InvalidArgumentError(
            absl::StrCat("--expert-load: layer ", layer, " has ",
                         it->second.size(), " experts, the model ", E));
      }
      l = &it->second;
    }
    auto p = ComputePlacement(*l, P, flags.redundant);
    if (!p.ok()) return Prefixed("--redundant-experts: ", p.status());
    placement->layers[layer] = std::move(*p);
  }
  return std::shared_ptr<const ExpertPlacement>(std::move(placement));
}

}  // namespace moe
