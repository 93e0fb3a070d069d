#include "tests/testutil/hf_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mistral_params.h"
#include "core/safetensors.h"
#include "core/status_macros.h"
#include "kernels/mxfp4_rule.h"
#include "kernels/nvfp4_rule.h"
#include "nlohmann/json.hpp"

namespace moe::testing {

// Half the text experts' width (the release: 512 beside 1536).
int64_t ErnieVlVisionInter(const MoeLayerConfig& k) {
  return std::max<int64_t>(1, k.inter / 2);
}

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kVocab = 32;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  DType dtype = DType::kF32;  // kI32: integer ids; else the storage option
  bool fixed = false;         // stored as `dtype` whatever the options say
  std::vector<uint8_t> raw;   // non-empty: these bytes, as `dtype`
};

Tensor Raw(std::string name, std::vector<int64_t> shape, DType dtype,
           std::vector<uint8_t> raw) {
  Tensor t{std::move(name), std::move(shape), {}, dtype, true};
  t.raw = std::move(raw);
  return t;
}

Tensor Fixed(std::string name, std::vector<int64_t> shape,
             std::vector<float> values, DType dtype) {
  return Tensor{std::move(name), std::move(shape), std::move(values), dtype,
                true};
}

// Rows [rows, cols] (cols a multiple of 32) quantised by the engine's MXFP4
// rule (kernels/mxfp4_rule.h) into code pairs [rows, cols / 2] and E8M0
// scales [rows, cols / 32], appended. False when a value does not decode
// back exactly.
bool QuantiseMxfp4(const float* w, int64_t rows, int64_t cols,
                   std::vector<uint8_t>* pairs, std::vector<uint8_t>* scales) {
  bool exact = true;
  uint8_t codes[kernels::kMxBlock];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c0 = 0; c0 < cols; c0 += kernels::kMxBlock) {
      const float* v = w + i * cols + c0;
      const uint8_t s =
          kernels::Mxfp4QuantizeBlock(v, kernels::kMxBlock, codes);
      scales->push_back(s);
      for (int64_t j = 0; j < kernels::kMxBlock; j += 2) {
        pairs->push_back(static_cast<uint8_t>(codes[j] | (codes[j + 1] << 4)));
      }
      for (int64_t j = 0; j < kernels::kMxBlock; ++j) {
        exact = exact &&
                kernels::E2M1ToF32(codes[j]) * kernels::E8M0ToF32(s) == v[j];
      }
    }
  }
  return exact;
}

// [rows, cols] as FP8 e4m3 codes with one power-of-two scale per 128 x 128
// block (the smallest that keeps the block's amax within 448), as E8M0
// bytes [ceil(rows / 128), ceil(cols / 128)]. False when not exact.
bool QuantiseFp8E8M0(const float* w, int64_t rows, int64_t cols,
                     std::vector<uint8_t>* codes,
                     std::vector<uint8_t>* scales) {
  constexpr int64_t kB = 128;
  const int64_t rb = (rows + kB - 1) / kB, cb = (cols + kB - 1) / kB;
  codes->assign(rows * cols, 0);
  scales->assign(rb * cb, 127);
  bool exact = true;
  for (int64_t bi = 0; bi < rb; ++bi) {
    for (int64_t bj = 0; bj < cb; ++bj) {
      float amax = 0.0f;
      for (int64_t i = bi * kB; i < std::min(rows, (bi + 1) * kB); ++i) {
        for (int64_t j = bj * kB; j < std::min(cols, (bj + 1) * kB); ++j) {
          amax = std::max(amax, std::fabs(w[i * cols + j]));
        }
      }
      const int k = amax > 0.0f
                        ? static_cast<int>(std::ceil(std::log2(amax / 448.0f)))
                        : 0;
      (*scales)[bi * cb + bj] = static_cast<uint8_t>(k + 127);
      const float f = std::ldexp(1.0f, k);
      for (int64_t i = bi * kB; i < std::min(rows, (bi + 1) * kB); ++i) {
        for (int64_t j = bj * kB; j < std::min(cols, (bj + 1) * kB); ++j) {
          const uint8_t q = F32ToF8E4M3(w[i * cols + j] / f);
          (*codes)[i * cols + j] = q;
          exact = exact && F8E4M3ToF32(q) * f == w[i * cols + j];
        }
      }
    }
  }
  return exact;
}

std::vector<float> Filler(uint64_t seed, int64_t n, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
  }
  return v;
}

std::vector<float> Slice(const std::vector<float>& v, int64_t begin,
                         int64_t count) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + count);
}

// Llama 4's fused expert tensors, for x·W: gate_up_proj [E, H, 2I] (gate
// then up on the last axis) and down_proj [E, I, H].
void AddFusedExperts(const MoeLayerConfig& k, HfFamily f, int64_t layer,
                     const std::vector<float>& w1, const std::vector<float>& w3,
                     const std::vector<float>& w2, std::vector<Tensor>* out) {
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter;
  std::vector<float> gate_up(E * H * 2 * I), down(E * I * H);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < I; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t src = (e * I + i) * H + h;
        gate_up[(e * H + h) * 2 * I + i] = w1[src];
        gate_up[(e * H + h) * 2 * I + I + i] = w3[src];
        down[(e * I + i) * H + h] = w2[(e * H + h) * I + i];
      }
    }
  }
  out->push_back({HfTensorName(f, layer, WeightRole::kW1, 0),
                  {E, H, 2 * I},
                  std::move(gate_up)});
  out->push_back(
      {HfTensorName(f, layer, WeightRole::kW2, 0), {E, I, H}, std::move(down)});
}

// transformers v5's packed experts, nn.Linear weights as they lie:
// gate_up_proj [E, 2I, H] (each expert's w1 rows over its w3 rows) and
// down_proj [E, H, I] (each expert's w2), named as `layout`'s table names
// them (GraniteMoe's own input_linear / output_linear are so packed).
void AddPackedExperts(const MoeLayerConfig& k, HfFamily f, int64_t layer,
                      HfExpertLayout layout, const std::vector<float>& w1,
                      const std::vector<float>& w3, std::vector<float> w2,
                      std::vector<Tensor>* out) {
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter;
  std::vector<float> gate_up(E * 2 * I * H);
  for (int64_t e = 0; e < E; ++e) {
    std::copy_n(w1.begin() + e * I * H, I * H, gate_up.begin() + e * 2 * I * H);
    std::copy_n(w3.begin() + e * I * H, I * H,
                gate_up.begin() + (e * 2 + 1) * I * H);
  }
  out->push_back({HfTensorName(f, layer, WeightRole::kW1, 0, layout),
                  {E, 2 * I, H},
                  std::move(gate_up)});
  out->push_back({HfTensorName(f, layer, WeightRole::kW2, 0, layout),
                  {E, H, I},
                  std::move(w2)});
}

// gpt-oss's fused experts (the dequantised form transformers saves):
// gate_up_proj [E, H, 2I] with gate j at column 2j and up j at 2j+1, its
// bias [E, 2I] interleaved the same way, down_proj [E, I, H] and its bias.
void AddGptOssExperts(const MoeLayerConfig& k, HfFamily f, int64_t layer,
                      const std::vector<float>& w1,
                      const std::vector<float>& w3,
                      const std::vector<float>& w2,
                      const std::vector<float>& b1,
                      const std::vector<float>& b3,
                      const std::vector<float>& b2, std::vector<Tensor>* out) {
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter;
  std::vector<float> gate_up(E * H * 2 * I), down(E * I * H),
      gu_bias(E * 2 * I);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < I; ++i) {
      gu_bias[e * 2 * I + 2 * i] = b1[e * I + i];
      gu_bias[e * 2 * I + 2 * i + 1] = b3[e * I + i];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t src = (e * I + i) * H + h;
        gate_up[(e * H + h) * 2 * I + 2 * i] = w1[src];
        gate_up[(e * H + h) * 2 * I + 2 * i + 1] = w3[src];
        down[(e * I + i) * H + h] = w2[(e * H + h) * I + i];
      }
    }
  }
  out->push_back({HfTensorName(f, layer, WeightRole::kW1, 0),
                  {E, H, 2 * I},
                  std::move(gate_up)});
  out->push_back({HfTensorName(f, layer, WeightRole::kB1, 0),
                  {E, 2 * I},
                  std::move(gu_bias)});
  out->push_back(
      {HfTensorName(f, layer, WeightRole::kW2, 0), {E, I, H}, std::move(down)});
  out->push_back({HfTensorName(f, layer, WeightRole::kB2, 0), {E, H}, b2});
}

// gpt-oss as released: gate_up_proj_blocks [E, 2I, H/32, 16] (row 2j gate
// j, 2j+1 up j) and _scales [E, 2I, H/32], down_proj_blocks [E, H, I/32,
// 16] and _scales, biases bf16 [E, 2I] (interleaved) and [E, H].
bool AddGptOssReleased(const MoeLayerConfig& k, HfFamily f, int64_t layer,
                       const std::vector<float>& w1,
                       const std::vector<float>& w3,
                       const std::vector<float>& w2,
                       const std::vector<float>& b1,
                       const std::vector<float>& b3,
                       const std::vector<float>& b2, std::vector<Tensor>* out) {
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter;
  std::vector<float> gate_up(E * 2 * I * H), gu_bias(E * 2 * I);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < I; ++i) {
      std::copy_n(w1.begin() + (e * I + i) * H, H,
                  gate_up.begin() + (e * 2 * I + 2 * i) * H);
      std::copy_n(w3.begin() + (e * I + i) * H, H,
                  gate_up.begin() + (e * 2 * I + 2 * i + 1) * H);
      gu_bias[e * 2 * I + 2 * i] = b1[e * I + i];
      gu_bias[e * 2 * I + 2 * i + 1] = b3[e * I + i];
    }
  }
  std::vector<uint8_t> gu_pairs, gu_scales, d_pairs, d_scales;
  bool exact =
      QuantiseMxfp4(gate_up.data(), E * 2 * I, H, &gu_pairs, &gu_scales);
  exact = QuantiseMxfp4(w2.data(), E * H, I, &d_pairs, &d_scales) && exact;
  const std::string gu = HfTensorName(f, layer, WeightRole::kW1, 0);
  const std::string down = HfTensorName(f, layer, WeightRole::kW2, 0);
  out->push_back(Raw(gu + "_blocks", {E, 2 * I, H / 32, 16}, DType::kU8,
                     std::move(gu_pairs)));
  out->push_back(Raw(gu + "_scales", {E, 2 * I, H / 32}, DType::kU8,
                     std::move(gu_scales)));
  out->push_back(Fixed(HfTensorName(f, layer, WeightRole::kB1, 0), {E, 2 * I},
                       std::move(gu_bias), DType::kBF16));
  out->push_back(Raw(down + "_blocks", {E, H, I / 32, 16}, DType::kU8,
                     std::move(d_pairs)));
  out->push_back(
      Raw(down + "_scales", {E, H, I / 32}, DType::kU8, std::move(d_scales)));
  out->push_back(Fixed(HfTensorName(f, layer, WeightRole::kB2, 0), {E, H}, b2,
                       DType::kBF16));
  return exact;
}

// A ModelOpt NVFP4 linear [rows, cols] (cols a multiple of 16): code pairs
// U8 [rows, cols / 2], `weight_scale` F8_E4M3 [rows, cols / 16] and the F32
// scalars `weight_scale_2` and `input_scale`, appended. The global scale is
// the power of two at or above amax / (6 * 448), so that weights built as
// codes x E4M3 scales x a power of two come back exactly. False when a
// value does not decode back exactly.
bool AddNvfp4Linear(const std::string& weight_name, int64_t rows, int64_t cols,
                    const std::vector<float>& w, std::vector<Tensor>* out) {
  float amax = 0.0f;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  const float global =
      amax > 0.0f ? std::exp2(std::ceil(std::log2(amax / (6.0f * 448.0f))))
                  : 1.0f;
  std::vector<uint8_t> pairs, scales;
  bool exact = true;
  uint8_t codes[kernels::kNvBlock];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c0 = 0; c0 < cols; c0 += kernels::kNvBlock) {
      const float* v = w.data() + i * cols + c0;
      const uint8_t s =
          kernels::Nvfp4QuantizeBlock(v, kernels::kNvBlock, global, codes);
      scales.push_back(s);
      for (int64_t j = 0; j < kernels::kNvBlock; j += 2) {
        pairs.push_back(static_cast<uint8_t>(codes[j] | (codes[j + 1] << 4)));
      }
      for (int64_t j = 0; j < kernels::kNvBlock; ++j) {
        exact = exact &&
                kernels::E2M1ToF32(codes[j]) * kernels::E4M3ToF32(s) * global ==
                    v[j];
      }
    }
  }
  auto scalar = [](float f) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &f, 4);
    return b;
  };
  out->push_back(
      Raw(weight_name, {rows, cols / 2}, DType::kU8, std::move(pairs)));
  out->push_back(Raw(weight_name + "_scale", {rows, cols / 16}, DType::kF8E4M3,
                     std::move(scales)));
  out->push_back(
      Raw(weight_name + "_scale_2", {}, DType::kF32, scalar(global)));
  const std::string base = weight_name.substr(0, weight_name.size() - 7);
  out->push_back(Raw(base + ".input_scale", {}, DType::kF32, scalar(1.0f)));
  return exact;
}

// DeepSeek-V4 as released: one [out, in] linear as I8 fp4 code pairs
// [out, in/2] + F8_E8M0 .scale [out, in/32] (fp4) or F8_E4M3 + F8_E8M0
// .scale per 128 x 128 block (fp8).
bool AddV4Linear(const std::string& weight_name, int64_t rows, int64_t cols,
                 const std::vector<float>& w, bool fp4,
                 std::vector<Tensor>* out) {
  const std::string scale_name =
      weight_name.substr(0, weight_name.size() - 7) + ".scale";
  std::vector<uint8_t> codes, scales;
  bool exact;
  if (fp4) {
    exact = QuantiseMxfp4(w.data(), rows, cols, &codes, &scales);
    out->push_back(
        Raw(weight_name, {rows, cols / 2}, DType::kI8, std::move(codes)));
    out->push_back(
        Raw(scale_name, {rows, cols / 32}, DType::kF8E8M0, std::move(scales)));
  } else {
    exact = QuantiseFp8E8M0(w.data(), rows, cols, &codes, &scales);
    out->push_back(
        Raw(weight_name, {rows, cols}, DType::kF8E4M3, std::move(codes)));
    out->push_back(Raw(scale_name, {(rows + 127) / 128, (cols + 127) / 128},
                       DType::kF8E8M0, std::move(scales)));
  }
  return exact;
}

// compressed-tensors mxfp4-pack-quantized (Kimi K3's release): `<stem>.weight`
// becomes `<stem>.weight_packed` U8 [rows, cols / 2] and `<stem>.weight_scale`
// U8 (E8M0 bytes) [rows, cols / 32]. False when not exact.
bool AddCompressedMxfp4(const std::string& weight_name, int64_t rows,
                        int64_t cols, const std::vector<float>& w,
                        std::vector<Tensor>* out) {
  const std::string stem = weight_name.substr(0, weight_name.size() - 7);
  std::vector<uint8_t> pairs, scales;
  const bool exact = QuantiseMxfp4(w.data(), rows, cols, &pairs, &scales);
  out->push_back(Raw(stem + ".weight_packed", {rows, cols / 2}, DType::kU8,
                     std::move(pairs)));
  out->push_back(Raw(stem + ".weight_scale", {rows, cols / 32}, DType::kU8,
                     std::move(scales)));
  return exact;
}

// The 2026b/c tensors beside the experts: LatentMoE's projections (and
// their biases and norm), Gemma 4's router scales and branch norms. Norm
// weights of filler layers are near 1, as trained ones are.
void AddLayerVectors(const GoldenCase& c, HfFamily f, int64_t layer,
                     bool golden, uint64_t seed, bool released,
                     std::vector<Tensor>* out) {
  const MoeLayerConfig& k = c.config;
  const int64_t E = k.num_experts, H = k.hidden, Lt = k.latent;
  auto add = [&](WeightRole role, std::vector<int64_t> shape,
                 const std::vector<float>& src, uint64_t salt, float base) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v =
        golden ? Slice(src, 0, n) : Filler(seed + salt, n, 0.2f);
    if (!golden) {
      for (float& x : v) x += base;
    }
    Tensor t{HfTensorName(f, layer, role, -1), std::move(shape), std::move(v)};
    // The releases keep these bf16 (the golden values are exact in it).
    if (released) t = Fixed(t.name, t.shape, t.values, DType::kBF16);
    out->push_back(std::move(t));
  };
  if (Lt > 0) {
    add(WeightRole::kLatentW1, {Lt, H}, c.latent_w1, 20, 0.0f);
    add(WeightRole::kLatentW2, {H, Lt}, c.latent_w2, 21, 0.0f);
    if (k.latent_bias) {
      add(WeightRole::kLatentB1, {Lt}, c.latent_b1, 22, 0.0f);
      add(WeightRole::kLatentB2, {H}, c.latent_b2, 23, 0.0f);
    }
    if (k.latent_norm)
      add(WeightRole::kLatentNorm, {Lt}, c.latent_norm, 24, 1.0f);
  }
  if (k.router_prenorm)
    add(WeightRole::kGateScale, {H}, c.gate_scale, 25, 1.0f);
  if (k.output_bias) add(WeightRole::kOutputBias, {H}, c.output_bias, 31, 0.0f);
  if (k.per_expert_scale) {
    add(WeightRole::kPerExpertScale, {E}, c.per_expert_scale, 26, 1.0f);
  }
  if (k.branch_norms) {
    add(WeightRole::kExpertsInNorm, {H}, c.experts_in_norm, 27, 1.0f);
    add(WeightRole::kExpertsOutNorm, {H}, c.experts_out_norm, 28, 1.0f);
    if (k.has_shared()) {
      add(WeightRole::kSharedInNorm, {H}, c.shared_in_norm, 29, 1.0f);
      add(WeightRole::kSharedOutNorm, {H}, c.shared_out_norm, 30, 1.0f);
    }
  }
}

// ERNIE-4.5-VL as released (and as vLLM reads it): the text router
// mlp.gate.weight and the vision router mlp.gate.weight_1, each stored
// transposed, [H, E]. `gate` is the text router's [E, H] rows as written
// by the caller (replaced here by their transpose); the vision router is
// `vision`'s, or filler.
void AddErnieVlRouters(const MoeLayerConfig& k, std::vector<float> gate,
                       const GoldenCase* vision, uint64_t seed,
                       std::vector<Tensor>* out) {
  const int64_t E = k.num_experts, H = k.hidden;
  auto transposed = [&](const std::vector<float>& rows) {
    std::vector<float> t(E * H);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t h = 0; h < H; ++h) t[h * E + e] = rows[e * H + h];
    }
    return t;
  };
  Tensor& text = out->back();
  text.shape = {H, E};
  text.values = transposed(gate);
  const std::vector<float> v =
      vision != nullptr ? vision->gate : Filler(seed + 9, E * H, 0.2f);
  out->push_back({text.name + "_1", {H, E}, transposed(v)});
}

// Returns false when `released` and the golden weights are not exactly
// representable in the release's formats.
bool AddMoeLayer(const GoldenCase& c, HfFamily f, int64_t layer, bool golden,
                 uint64_t seed, std::vector<Tensor>* out, bool released = false,
                 HfExpertLayout layout = HfExpertLayout::kPerExpert,
                 bool nvfp4 = false, const GoldenCase* vision = nullptr) {
  bool exact = true;
  const MoeLayerConfig& k = c.config;
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter,
                S = k.shared_inter;
  auto values = [&](const std::vector<float>& src, int64_t begin, int64_t count,
                    uint64_t salt) {
    return golden ? Slice(src, begin, count) : Filler(seed + salt, count, 0.2f);
  };
  auto name = [&](WeightRole r, int64_t e) {
    return HfTensorName(f, layer, r, e, layout);
  };
  // The router's rows: the routed experts' and LongCat-Flash's zero
  // experts'.
  const int64_t R = k.router_rows();
  out->push_back(
      {name(WeightRole::kGate, -1), {R, H}, values(c.gate, 0, R * H, 1)});
  const bool ernie_vl = f == HfFamily::kErnie45VlMoe;
  if (ernie_vl) AddErnieVlRouters(k, out->back().values, vision, seed, out);
  // The releases' routers: bf16 weights (and gpt-oss's bias), V4's f32
  // correction bias.
  if (released)
    out->back() =
        Fixed(out->back().name, {R, H}, out->back().values, DType::kBF16);
  if (k.use_bias && ernie_vl) {
    // ERNIE-4.5-VL's moe_statics bias [2, E]: the text row, the vision row.
    std::vector<float> rows = values(c.bias, 0, E, 2);
    const std::vector<float> v =
        vision != nullptr ? vision->bias : Filler(seed + 8, E, 0.2f);
    rows.insert(rows.end(), v.begin(), v.end());
    out->push_back({name(WeightRole::kExpertBias, -1), {2, E}, rows});
  } else if (k.use_bias) {
    // ERNIE 4.5 stores its moe_statics bias as [1, E].
    std::vector<int64_t> shape = {R};
    if (f == HfFamily::kErnie45Moe) shape = {1, E};
    out->push_back(
        {name(WeightRole::kExpertBias, -1), shape, values(c.bias, 0, R, 2)});
    if (released) {
      out->back() =
          Fixed(out->back().name, shape, out->back().values, DType::kF32);
    }
  }
  if (k.router_bias) {
    out->push_back({name(WeightRole::kRouterBias, -1),
                    {R},
                    values(c.router_bias, 0, R, 7)});
    if (released) {
      out->back() =
          Fixed(out->back().name, {R}, out->back().values, DType::kBF16);
    }
  }
  if (k.hash_routed()) {
    // Expert ids, stored as I32 like DeepSeek-V4 (converted on write).
    std::vector<float> ids(c.tid2eid.begin(), c.tid2eid.end());
    if (!golden) {
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<float>((i / k.top_k + i % k.top_k) % E);
      }
    }
    out->push_back({name(WeightRole::kTid2Eid, -1),
                    {k.hash_vocab, k.top_k},
                    std::move(ids),
                    DType::kI32});
  }
  if (released && f == HfFamily::kGptOss) {
    exact = AddGptOssReleased(
        k, f, layer, values(c.w1, 0, E * I * H, 10),
        values(c.w3, 0, E * I * H, 1000), values(c.w2, 0, E * I * H, 2000),
        values(c.b1, 0, E * I, 11), values(c.b3, 0, E * I, 12),
        values(c.b2, 0, E * H, 13), out);
  } else if (released && f == HfFamily::kDeepseekV4) {
    for (int64_t e = 0; e < E; ++e) {
      exact = AddV4Linear(name(WeightRole::kW1, e), I, H,
                          values(c.w1, e * I * H, I * H, 10 + e), true, out) &&
              exact;
      exact =
          AddV4Linear(name(WeightRole::kW3, e), I, H,
                      values(c.w3, e * I * H, I * H, 1000 + e), true, out) &&
          exact;
      exact =
          AddV4Linear(name(WeightRole::kW2, e), H, I,
                      values(c.w2, e * I * H, I * H, 2000 + e), true, out) &&
          exact;
    }
  } else if (released && f == HfFamily::kKimiK3) {
    // compressed-tensors mxfp4-pack-quantized: weight_packed U8 [out,
    // in/2] and weight_scale U8 (E8M0) [out, in/32] per expert linear.
    const int64_t W = k.expert_width();
    for (int64_t e = 0; e < E; ++e) {
      exact = AddCompressedMxfp4(name(WeightRole::kW1, e), I, W,
                                 values(c.w1, e * I * W, I * W, 10 + e), out) &&
              exact;
      exact =
          AddCompressedMxfp4(name(WeightRole::kW3, e), I, W,
                             values(c.w3, e * I * W, I * W, 1000 + e), out) &&
          exact;
      exact =
          AddCompressedMxfp4(name(WeightRole::kW2, e), W, I,
                             values(c.w2, e * I * W, I * W, 2000 + e), out) &&
          exact;
    }
  } else if (f == HfFamily::kDbrx) {
    // DBRX's per-role parameters [E*I, H]: w1 (gate) and v1 (up) hold each
    // expert's nn.Linear rows, w2 each expert's down weight transposed
    // (x·W: row i of expert e is its intermediate i's output row).
    const std::string m = HfLayerPrefix(f, layer) + "ffn.experts.mlp.";
    std::vector<float> w2 = values(c.w2, 0, E * I * H, 2000),
                       w2_rows(E * I * H);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < I; ++i) {
          w2_rows[(e * I + i) * H + h] = w2[(e * H + h) * I + i];
        }
      }
    }
    out->push_back({m + "w1", {E * I, H}, values(c.w1, 0, E * I * H, 10)});
    out->push_back({m + "v1", {E * I, H}, values(c.w3, 0, E * I * H, 1000)});
    out->push_back({m + "w2", {E * I, H}, std::move(w2_rows)});
  } else if (f == HfFamily::kGptOss) {
    AddGptOssExperts(k, f, layer, values(c.w1, 0, E * I * H, 10),
                     values(c.w3, 0, E * I * H, 1000),
                     values(c.w2, 0, E * I * H, 2000),
                     values(c.b1, 0, E * I, 11), values(c.b3, 0, E * I, 12),
                     values(c.b2, 0, E * H, 13), out);
  } else if (HfLocate(f, k, layer, WeightRole::kW1, 0, layout).linear) {
    AddPackedExperts(k, f, layer, layout, values(c.w1, 0, E * I * H, 10),
                     values(c.w3, 0, E * I * H, 1000),
                     values(c.w2, 0, E * I * H, 2000), out);
  } else if (HfLocate(f, k, layer, WeightRole::kW1, 0).fused) {
    AddFusedExperts(k, f, layer, values(c.w1, 0, E * I * H, 10),
                    values(c.w3, 0, E * I * H, 1000),
                    values(c.w2, 0, E * I * H, 2000), out);
  } else {
    if (k.expert_bias) {
      for (int64_t e = 0; e < E; ++e) {
        out->push_back(
            {name(WeightRole::kB1, e), {I}, values(c.b1, e * I, I, 3000 + e)});
        out->push_back(
            {name(WeightRole::kB3, e), {I}, values(c.b3, e * I, I, 4000 + e)});
        out->push_back(
            {name(WeightRole::kB2, e), {H}, values(c.b2, e * H, H, 5000 + e)});
      }
    }
    // Under LatentMoE the experts read and write rows of the latent width.
    const int64_t W = k.expert_width();
    for (int64_t e = 0; nvfp4 && e < E; ++e) {
      if (k.gated) {
        exact = AddNvfp4Linear(name(WeightRole::kW1, e), I, W,
                               values(c.w1, e * I * W, I * W, 10 + e), out) &&
                exact;
      }
      exact = AddNvfp4Linear(name(WeightRole::kW3, e), I, W,
                             values(c.w3, e * I * W, I * W, 1000 + e), out) &&
              exact;
      exact = AddNvfp4Linear(name(WeightRole::kW2, e), W, I,
                             values(c.w2, e * I * W, I * W, 2000 + e), out) &&
              exact;
    }
    for (int64_t e = 0; !nvfp4 && e < E; ++e) {
      if (k.gated) {
        out->push_back({name(WeightRole::kW1, e),
                        {I, W},
                        values(c.w1, e * I * W, I * W, 10 + e)});
      }
      out->push_back({name(WeightRole::kW3, e),
                      {I, W},
                      values(c.w3, e * I * W, I * W, 1000 + e)});
      out->push_back({name(WeightRole::kW2, e),
                      {W, I},
                      values(c.w2, e * I * W, I * W, 2000 + e)});
    }
  }
  if (S > 0 && released && f == HfFamily::kDeepseekV4) {
    exact = AddV4Linear(name(WeightRole::kSharedW1, -1), S, H,
                        values(c.sw1, 0, S * H, 3), false, out) &&
            exact;
    exact = AddV4Linear(name(WeightRole::kSharedW3, -1), S, H,
                        values(c.sw3, 0, S * H, 4), false, out) &&
            exact;
    exact = AddV4Linear(name(WeightRole::kSharedW2, -1), H, S,
                        values(c.sw2, 0, S * H, 5), false, out) &&
            exact;
  } else if (S > 0 && (f == HfFamily::kGraniteMoeShared ||
                       f == HfFamily::kGraniteMoeHybrid ||
                       f == HfFamily::kGraniteMoeSwa)) {
    // Granite's shared_mlp: input_linear [2S, H] holds the gate rows over
    // the up rows; output_linear [H, S].
    const std::string sp = HfLayerPrefix(f, layer) + "shared_mlp.";
    std::vector<float> in = values(c.sw1, 0, S * H, 3);
    const std::vector<float> up = values(c.sw3, 0, S * H, 4);
    in.insert(in.end(), up.begin(), up.end());
    out->push_back({sp + "input_linear.weight", {2 * S, H}, std::move(in)});
    out->push_back(
        {sp + "output_linear.weight", {H, S}, values(c.sw2, 0, S * H, 5)});
  } else if (S > 0) {
    if (k.gated) {
      out->push_back({name(WeightRole::kSharedW1, -1),
                      {S, H},
                      values(c.sw1, 0, S * H, 3)});
    }
    out->push_back(
        {name(WeightRole::kSharedW3, -1), {S, H}, values(c.sw3, 0, S * H, 4)});
    out->push_back(
        {name(WeightRole::kSharedW2, -1), {H, S}, values(c.sw2, 0, S * H, 5)});
  }
  if (k.shared_gate) {
    out->push_back(
        {name(WeightRole::kSharedGate, -1), {1, H}, values(c.sgate, 0, H, 6)});
  }
  AddLayerVectors(c, f, layer, golden, seed, released, out);
  if (ernie_vl) {
    // The vision experts, numbered after the text ones, of their own width.
    const int64_t Iv = ErnieVlVisionInter(k);
    for (int64_t e = 0; e < E; ++e) {
      auto part = [&](const std::vector<float>* from, uint64_t salt) {
        return from != nullptr ? Slice(*from, e * Iv * H, Iv * H)
                               : Filler(seed + salt + e, Iv * H, 0.2f);
      };
      out->push_back({name(WeightRole::kW1, E + e),
                      {Iv, H},
                      part(vision != nullptr ? &vision->w1 : nullptr, 6000)});
      out->push_back({name(WeightRole::kW3, E + e),
                      {Iv, H},
                      part(vision != nullptr ? &vision->w3 : nullptr, 7000)});
      out->push_back({name(WeightRole::kW2, E + e),
                      {H, Iv},
                      part(vision != nullptr ? &vision->w2 : nullptr, 8000)});
    }
  }
  return exact;
}

// A Step-3.5-Flash or Step-3 MoE layer as its release names it (spelled
// here, not taken from the loader's table): model.layers.{L}.moe.gate.weight
// (fp32), Step-3.5's moe.router_bias [E], each role's experts packed as
// nn.Linear moe.gate_proj / up_proj.weight [E, I, H] and
// moe.down_proj.weight [E, H, I], and the share_expert at the layer level.
void AddStepLayer(const GoldenCase& c, int64_t layer, bool golden,
                  bool router_bias, uint64_t seed, std::vector<Tensor>* out) {
  const MoeLayerConfig& k = c.config;
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter,
                S = k.shared_inter;
  auto values = [&](const std::vector<float>& src, int64_t count,
                    uint64_t salt) {
    return golden ? Slice(src, 0, count) : Filler(seed + salt, count, 0.2f);
  };
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  out->push_back({p + "moe.gate.weight", {E, H}, values(c.gate, E * H, 1)});
  if (router_bias) {
    out->push_back({p + "moe.router_bias", {E}, values(c.bias, E, 2)});
  }
  out->push_back(
      {p + "moe.gate_proj.weight", {E, I, H}, values(c.w1, E * I * H, 10)});
  out->push_back(
      {p + "moe.up_proj.weight", {E, I, H}, values(c.w3, E * I * H, 1000)});
  out->push_back(
      {p + "moe.down_proj.weight", {E, H, I}, values(c.w2, E * I * H, 2000)});
  out->push_back(
      {p + "share_expert.gate_proj.weight", {S, H}, values(c.sw1, S * H, 3)});
  out->push_back(
      {p + "share_expert.up_proj.weight", {S, H}, values(c.sw3, S * H, 4)});
  out->push_back(
      {p + "share_expert.down_proj.weight", {H, S}, values(c.sw2, S * H, 5)});
}

// Nemotron 3's layer kinds as written: odd layers MoE ('E'), even ones
// Mamba, attention and dense MLP in turn.
char NemotronLayerKind(int64_t layer) {
  return layer % 2 == 1 ? 'E' : "M*-"[(layer / 2) % 3];
}

// A Nemotron layer's own tensors besides the MoE mixer: a Mamba-2 mixer,
// attention or a dense relu2 MLP, and the layer's norm.
void AddNemotronUnrelated(int64_t H, int64_t layer, uint64_t seed,
                          std::vector<Tensor>* out) {
  const std::string p = HfLayerPrefix(HfFamily::kNemotronH, layer);
  out->push_back({p + "norm.weight", {H}, std::vector<float>(H, 1.0f)});
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out->push_back({p + "mixer." + name, std::move(shape),
                    Filler(seed + layer * 7 + name.size(), n, 0.1f)});
  };
  switch (NemotronLayerKind(layer)) {
    case 'M':
      add("in_proj.weight", {2 * H, H});
      add("conv1d.weight", {H, 1, 4});
      add("A_log", {4});
      add("D", {4});
      add("dt_bias", {4});
      add("norm.weight", {H});
      add("out_proj.weight", {H, H});
      break;
    case '*':
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        add(absl::StrCat(proj, ".weight"), {H, H});
      }
      break;
    case '-':
      add("up_proj.weight", {2 * H, H});
      add("down_proj.weight", {H, 2 * H});
      break;
    default:
      break;
  }
}

// What the 2026d families keep around their MoE blocks, which the loader
// must never read: PhiMoE's attention and LayerNorm biases; LongCat-Flash's
// two sublayers (MLA attention, norms, two dense MLPs) per layer; JetMoE's
// mixture-of-attention, whose router has the MLP router's shape.
// JetMoE's attention experts in the unrelated tensors.
constexpr int64_t kJetMoeExperts = 8;

void AddRouterFamilyUnrelated(HfFamily f, int64_t H, int64_t layer,
                              uint64_t seed, std::vector<Tensor>* out) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out->push_back({p + name, std::move(shape),
                    Filler(seed + layer * 11 + name.size(), n, 0.1f)});
  };
  if (f == HfFamily::kPhimoe) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      add(absl::StrCat("self_attn.", proj, ".weight"), {H, H});
      add(absl::StrCat("self_attn.", proj, ".bias"), {H});
    }
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
      add(absl::StrCat(norm, ".weight"), {H});
      add(absl::StrCat(norm, ".bias"), {H});
    }
  } else if (f == HfFamily::kLongcatFlash) {
    for (int s = 0; s < 2; ++s) {
      add(absl::StrCat("self_attn.", s, ".q_a_proj.weight"), {H, H});
      add(absl::StrCat("self_attn.", s, ".kv_a_proj_with_mqa.weight"), {H, H});
      add(absl::StrCat("self_attn.", s, ".o_proj.weight"), {H, H});
      add(absl::StrCat("input_layernorm.", s, ".weight"), {H});
      add(absl::StrCat("post_attention_layernorm.", s, ".weight"), {H});
      for (const char* proj : {"gate_proj", "up_proj"}) {
        add(absl::StrCat("mlps.", s, ".", proj, ".weight"), {2 * H, H});
      }
      add(absl::StrCat("mlps.", s, ".down_proj.weight"), {H, 2 * H});
    }
  } else if (f == HfFamily::kJetMoe) {
    add("self_attention.experts.router.layer.weight", {kJetMoeExperts, H});
    add("self_attention.experts.input_linear.weight", {kJetMoeExperts, H, H});
    add("self_attention.experts.output_linear.weight", {kJetMoeExperts, H, H});
    add("self_attention.kv_proj.weight", {2 * H, H});
    add("input_layernorm.weight", {H});
    add("post_attention_layernorm.weight", {H});
  }
}

void AddUnrelated(HfFamily f, int64_t H, int64_t layer, uint64_t seed,
                  std::vector<Tensor>* out) {
  if (f == HfFamily::kNemotronH) {
    AddNemotronUnrelated(H, layer, seed, out);
    return;
  }
  if (f == HfFamily::kPhimoe || f == HfFamily::kLongcatFlash ||
      f == HfFamily::kJetMoe) {
    AddRouterFamilyUnrelated(f, H, layer, seed, out);
    return;
  }
  const std::string p = HfLayerPrefix(f, layer);
  if (f == HfFamily::kDbrx) {
    // DBRX's fused attention and its two norms per block.
    const std::string a = p + "norm_attn_norm.";
    out->push_back({a + "attn.Wqkv.weight",
                    {3 * H, H},
                    Filler(seed + layer * 7 + 'q', 3 * H * H, 0.1f)});
    out->push_back({a + "attn.out_proj.weight",
                    {H, H},
                    Filler(seed + layer * 7 + 'o', H * H, 0.1f)});
    out->push_back({a + "norm_1.weight", {H}, std::vector<float>(H, 1.0f)});
    out->push_back({a + "norm_2.weight", {H}, std::vector<float>(H, 1.0f)});
    return;
  }
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    out->push_back({absl::StrCat(p, "self_attn.", proj, ".weight"),
                    {H, H},
                    Filler(seed + layer * 7 + proj[0], H * H, 0.1f)});
  }
  if (f == HfFamily::kGlmMoeDsa) {
    // GLM-5's DSA indexer, part of the attention the loader never reads.
    out->push_back({p + "self_attn.indexer.wk.weight",
                    {H, H},
                    Filler(seed + layer * 7 + 'i', H * H, 0.1f)});
  }
  if (f == HfFamily::kDeepseekV32) {
    // DeepSeek-V3.2's DSA indexer, part of the attention.
    out->push_back({p + "self_attn.indexer.wq_b.weight",
                    {H, H},
                    Filler(seed + layer * 7 + 'j', H * H, 0.1f)});
  }
  if (f == HfFamily::kBailingMoe || f == HfFamily::kBailingMoeV2) {
    // Ling's fused attention projections.
    out->push_back({p + "attention.query_key_value.weight",
                    {3 * H, H},
                    Filler(seed + layer * 7 + 'q', 3 * H * H, 0.1f)});
    out->push_back({p + "attention.dense.weight",
                    {H, H},
                    Filler(seed + layer * 7 + 'd', H * H, 0.1f)});
  }
  out->push_back(
      {p + "input_layernorm.weight", {H}, std::vector<float>(H, 1.0f)});
  out->push_back({p + "post_attention_layernorm.weight",
                  {H},
                  std::vector<float>(H, 1.0f)});
  if (f == HfFamily::kArctic) {
    // Arctic's dense residual MLP and its norm, on every layer: the host's.
    out->push_back(
        {p + "residual_layernorm.weight", {H}, std::vector<float>(H, 1.0f)});
    for (const char* w : {"w1", "w3", "w2"}) {
      out->push_back({absl::StrCat(p, "residual_mlp.", w, ".weight"),
                      {H, H},
                      Filler(seed + layer * 7 + w[1], H * H, 0.1f)});
    }
  }
  if (f == HfFamily::kJamba || f == HfFamily::kGraniteMoeHybrid) {
    // The Mamba mixer of a hybrid stack, here on every layer beside the
    // attention projections (host-side either way).
    const std::string m = p + "mamba.";
    out->push_back({m + "in_proj.weight",
                    {4 * H, H},
                    Filler(seed + layer * 7 + 'm', 4 * H * H, 0.1f)});
    out->push_back({m + "conv1d.weight",
                    {2 * H, 1, 4},
                    Filler(seed + layer * 7 + 'c', 8 * H, 0.1f)});
    out->push_back({m + "A_log", {4}, Filler(seed + layer, 4, 0.1f)});
    out->push_back({m + "out_proj.weight",
                    {H, 2 * H},
                    Filler(seed + layer * 7 + 'o', 2 * H * H, 0.1f)});
  }
  if (f == HfFamily::kGemma4 || f == HfFamily::kGemma4Text) {
    // The layer's own FFN output norm, which the host applies to y.
    out->push_back({p + "post_feedforward_layernorm.weight",
                    {H},
                    Filler(seed + layer * 7 + 'p', H, 0.1f)});
  }
}

void AddDenseMlp(HfFamily f, int64_t H, int64_t layer, uint64_t seed,
                 std::vector<Tensor>* out) {
  const bool llama4 = f == HfFamily::kLlama4 || f == HfFamily::kLlama4Text ||
                      f == HfFamily::kJamba;
  // A dense MLP named w1 / w3 / w2 under `m`.
  auto w1w3w2 = [&](const std::string& m) {
    out->push_back(
        {m + "w1.weight", {2 * H, H}, Filler(seed + 91, 2 * H * H, 0.1f)});
    out->push_back(
        {m + "w3.weight", {2 * H, H}, Filler(seed + 92, 2 * H * H, 0.1f)});
    out->push_back(
        {m + "w2.weight", {H, 2 * H}, Filler(seed + 93, 2 * H * H, 0.1f)});
  };
  if (f == HfFamily::kLfm2Moe || f == HfFamily::kLfm2Vl) {
    // LFM2-MoE's dense layers: feed_forward.w1 / w3 / w2.
    w1w3w2(HfLayerPrefix(f, layer) + "feed_forward.");
    return;
  }
  const std::string p =
      HfLayerPrefix(f, layer) + (llama4 ? "feed_forward." : "mlp.");
  if (f == HfFamily::kArctic) {
    // Arctic's dense layers keep an MLP under block_sparse_moe.
    w1w3w2(HfLayerPrefix(f, layer) + "block_sparse_moe.");
    return;
  }
  out->push_back(
      {p + "gate_proj.weight", {2 * H, H}, Filler(seed + 91, 2 * H * H, 0.1f)});
  out->push_back(
      {p + "up_proj.weight", {2 * H, H}, Filler(seed + 92, 2 * H * H, 0.1f)});
  out->push_back(
      {p + "down_proj.weight", {H, 2 * H}, Filler(seed + 93, 2 * H * H, 0.1f)});
}

// Multi-token-prediction modules, which the loader must skip: DeepSeek-V3,
// Kimi K2 and GLM-4.5 store them as layers num_hidden_layers.. (an MoE layer
// each), Qwen3-Next under mtp.*. Poisoned with NaN so that loading one by
// mistake cannot go unnoticed.
void AddMtp(const GoldenCase& c, const HfWriteOptions& o, int64_t num_layers,
            std::vector<Tensor>* tensors) {
  const int64_t H = c.config.hidden;
  std::vector<Tensor> mtp;
  switch (o.family) {
    case HfFamily::kDeepseekV3:
    case HfFamily::kKimiK2:
    case HfFamily::kGlm4Moe:
    case HfFamily::kGlmMoeDsa:
    case HfFamily::kDeepseekV32:
    case HfFamily::kGlm4MoeLite:
    case HfFamily::kHyV3:
    case HfFamily::kBailingMoeV3:
      AddMoeLayer(c, o.family, num_layers, false, o.seed, &mtp);
      mtp.push_back(
          {absl::StrCat("model.layers.", num_layers, ".eh_proj.weight"),
           {H, 2 * H},
           {}});
      break;
    case HfFamily::kQwen3Next:
    case HfFamily::kQwen35Moe:
    case HfFamily::kMimoV2Flash:
    case HfFamily::kNemotronH:
    case HfFamily::kDeepseekV4: {
      // Qwen3-Next and Qwen3.5: mtp.layers.0.mlp.*; MiMo-V2-Flash:
      // model.mtp.layers.0.mlp.*; DeepSeek-V4: mtp.0.ffn.*; Nemotron 3:
      // mtp.layers.0.mixer.*.
      const bool mimo = o.family == HfFamily::kMimoV2Flash;
      const std::string strip =
          o.family == HfFamily::kQwen3Next || mimo ? "model."
          : o.family == HfFamily::kQwen35Moe       ? "model.language_model."
          : o.family == HfFamily::kNemotronH       ? "backbone."
                                                   : "layers.";
      const std::string into = mimo ? "model.mtp." : "mtp.";
      std::vector<Tensor> layer;
      AddMoeLayer(c, o.family, 0, false, o.seed, &layer, false, o.layout);
      for (auto& t : layer) {
        t.name = into + t.name.substr(strip.size());
        mtp.push_back(std::move(t));
      }
      mtp.push_back({into + "fc.weight", {H, 2 * H}, {}});
      break;
    }
    case HfFamily::kStep3p5:
      // Its MTP layers are model.layers.{num_hidden_layers + i}.
      AddStepLayer(c, num_layers, false, true, o.seed, &mtp);
      mtp.push_back(
          {absl::StrCat("model.layers.", num_layers, ".eh_proj.weight"),
           {H, 2 * H},
           {}});
      break;
    default:
      return;
  }
  for (auto& t : mtp) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.values.assign(n, std::numeric_limits<float>::quiet_NaN());
    tensors->push_back(std::move(t));
  }
}

absl::Status WriteJson(const fs::path& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(2);
  return f ? absl::OkStatus()
           : absl::InternalError(absl::StrCat("cannot write ", path.string()));
}

}  // namespace

namespace {

const char* Architecture(HfFamily f) {
  switch (f) {
    case HfFamily::kMixtral:
      return "MixtralForCausalLM";
    case HfFamily::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case HfFamily::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case HfFamily::kOlmoe:
      return "OlmoeForCausalLM";
    case HfFamily::kDeepseekV2:
      return "DeepseekV2ForCausalLM";
    case HfFamily::kDeepseekV3:
    case HfFamily::kKimiK2:
      return "DeepseekV3ForCausalLM";
    case HfFamily::kGlm4Moe:
      return "Glm4MoeForCausalLM";
    case HfFamily::kGlmMoeDsa:
      return "GlmMoeDsaForCausalLM";
    case HfFamily::kMimoV2Flash:
      return "MiMoV2FlashForCausalLM";
    case HfFamily::kQwen3Next:
      return "Qwen3NextForCausalLM";
    case HfFamily::kQwen35Moe:
      return "Qwen3_5MoeForConditionalGeneration";
    case HfFamily::kMinimaxM2:
      return "MiniMaxM2ForCausalLM";
    case HfFamily::kLlama4:
      return "Llama4ForConditionalGeneration";
    case HfFamily::kLlama4Text:
      return "Llama4ForCausalLM";
    case HfFamily::kErnie45Moe:
      return "Ernie4_5_MoeForCausalLM";
    case HfFamily::kErnie45VlMoe:
      return "Ernie4_5_VLMoeForConditionalGeneration";
    case HfFamily::kGptOss:
      return "GptOssForCausalLM";
    case HfFamily::kDeepseekV4:
      return "DeepseekV4ForCausalLM";
    case HfFamily::kNemotronH:
      return "NemotronHForCausalLM";
    case HfFamily::kGemma4:
      return "Gemma4ForConditionalGeneration";
    case HfFamily::kKimiK3:
      return "KimiK3ForConditionalGeneration";
    case HfFamily::kFlexOlmo:
      return "FlexOlmoForCausalLM";
    case HfFamily::kMellum:
      return "MellumForCausalLM";
    case HfFamily::kMinimax:
      return "MiniMaxText01ForCausalLM";
    case HfFamily::kQwen3VlMoe:
      return "Qwen3VLMoeForConditionalGeneration";
    case HfFamily::kGraniteMoe:
      return "GraniteMoeForCausalLM";
    case HfFamily::kArctic:
      return "ArcticForCausalLM";
    case HfFamily::kAria:
      return "AriaForConditionalGeneration";
    case HfFamily::kJamba:
      return "JambaForCausalLM";
    case HfFamily::kGraniteMoeShared:
      return "GraniteMoeSharedForCausalLM";
    case HfFamily::kGraniteMoeHybrid:
      return "GraniteMoeHybridForCausalLM";
    case HfFamily::kDbrx:
      return "DbrxForCausalLM";
    case HfFamily::kHunyuanV1Moe:
      return "HunYuanMoEV1ForCausalLM";
    case HfFamily::kQwen3OmniMoe:
      return "Qwen3OmniMoeForConditionalGeneration";
    case HfFamily::kDeepseek:
      return "DeepseekForCausalLM";
    case HfFamily::kDeepseekV32:
      return "DeepseekV32ForCausalLM";
    case HfFamily::kDots1:
      return "Dots1ForCausalLM";
    case HfFamily::kGlm4MoeLite:
      return "Glm4MoeLiteForCausalLM";
    case HfFamily::kSolarOpen:
      return "SolarOpenForCausalLM";
    case HfFamily::kKimiLinear:
      return "KimiLinearForCausalLM";
    case HfFamily::kBailingMoe:
      return "BailingMoeForCausalLM";
    case HfFamily::kBailingMoeV2:
      return "BailingMoeV2ForCausalLM";
    case HfFamily::kGlm4vMoe:
      return "Glm4vMoeForConditionalGeneration";
    case HfFamily::kKimiVl:
      return "KimiVLForConditionalGeneration";
    case HfFamily::kKimiK25:
      return "KimiK25ForConditionalGeneration";
    case HfFamily::kAfmoe:
      return "AfmoeForCausalLM";
    case HfFamily::kLfm2Moe:
      return "Lfm2MoeForCausalLM";
    case HfFamily::kExaoneMoe:
      return "ExaoneMoeForCausalLM";
    case HfFamily::kPhimoe:
      return "PhimoeForCausalLM";
    case HfFamily::kLongcatFlash:
      return "LongcatFlashForCausalLM";
    case HfFamily::kCohere2Moe:
      return "Cohere2MoeForCausalLM";
    case HfFamily::kJetMoe:
      return "JetMoeForCausalLM";
    case HfFamily::kStep3p5:
      return "Step3p5ForCausalLM";
    case HfFamily::kStep3Text:
      return "Step3TextForCausalLM";
    case HfFamily::kGrok1:
      return "Grok1ModelForCausalLM";
    case HfFamily::kHyV3:
      return "HYV3ForCausalLM";
    case HfFamily::kBailingMoeV3:
      return "BailingMoeV3ForCausalLM";
    case HfFamily::kStep3Vl:
      return "Step3VLForConditionalGeneration";
    case HfFamily::kMinimaxVl01:
      return "MiniMaxVL01ForConditionalGeneration";
    case HfFamily::kInternS1:
      return "InternS1ForConditionalGeneration";
    case HfFamily::kInternVl:
      return "InternVLForConditionalGeneration";
    case HfFamily::kInternVlChat:
      return "InternVLChatModel";
    case HfFamily::kOvis26Moe:
      return "Ovis2_6_MoeForCausalLM";
    case HfFamily::kLfm2Vl:
      return "Lfm2VlForConditionalGeneration";
    case HfFamily::kGraniteMoeSwa:
      return "GraniteMoeSWAForCausalLM";
    case HfFamily::kMinicpm:
      return "MiniCPMForCausalLM";
    case HfFamily::kGemma4Text:
      return "Gemma4ForCausalLM";
  }
  return "";
}

bool Pre2026(HfFamily f) {
  switch (f) {
    case HfFamily::kMixtral:
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
    case HfFamily::kOlmoe:
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3:
      return true;
    default:
      return false;
  }
}

// The DeepSeek-V3 style keys (DeepSeek-V2/V3, Kimi K2, GLM-4.5 and -5,
// MiMo-V2-Flash). Layer 0 is dense, the others MoE.
void DeepseekKeys(const MoeLayerConfig& c, HfFamily f, int64_t num_layers,
                  json* j) {
  (*j)["n_routed_experts"] = c.num_experts;
  (*j)["moe_intermediate_size"] = c.inter;
  (*j)["intermediate_size"] = 2 * c.hidden;
  (*j)["n_shared_experts"] = c.shared_inter / c.inter;
  (*j)["norm_topk_prob"] = c.route_norm;
  (*j)["routed_scaling_factor"] = c.route_scale;
  (*j)["first_k_dense_replace"] = 1;
  (*j)["n_group"] = c.n_groups > 0 ? c.n_groups : 1;
  (*j)["topk_group"] = c.n_groups > 0 ? c.topk_groups : 1;
  if (f == HfFamily::kGlm4Moe || f == HfFamily::kGlmMoeDsa) {
    // GLM-4.5 has no scoring_func / topk_method / moe_layer_freq keys.
    (*j)["num_nextn_predict_layers"] = 1;
    if (f == HfFamily::kGlmMoeDsa) {
      // GLM-5 as transformers writes it: each layer's MLP named, and the
      // DSA indexer's keys, which the loader ignores.
      (*j)["mlp_layer_types"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        (*j)["mlp_layer_types"].push_back(l == 0 ? "dense" : "sparse");
      }
      (*j)["index_topk"] = 2048;
      (*j)["index_n_heads"] = 4;
    }
    return;
  }
  (*j)["moe_layer_freq"] = 1;
  // The 2026 score functions travel as moe_score_func (HfConfigJson).
  (*j)["scoring_func"] =
      c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
  if (f == HfFamily::kDeepseekV2) {
    (*j)["topk_method"] = c.n_groups > 0 ? "group_limited_greedy" : "greedy";
    return;
  }
  (*j)["topk_method"] = "noaux_tc";
  (*j)["num_nextn_predict_layers"] = 1;
  if (f == HfFamily::kMimoV2Flash) {
    // MiMo-V2-Flash's Hub config: no shared expert and no scale said by
    // null, and moe_layer_freq a per-layer 0 / 1 list.
    (*j)["n_shared_experts"] = nullptr;
    if (c.route_scale == 1.0f) (*j)["routed_scaling_factor"] = nullptr;
    (*j)["moe_layer_freq"] = json::array();
    for (int64_t l = 0; l < num_layers; ++l) {
      (*j)["moe_layer_freq"].push_back(l == 0 ? 0 : 1);
    }
    (*j)["auto_map"] = {
        {"AutoConfig", "configuration_mimo_v2_flash.MiMoV2FlashConfig"},
        {"AutoModelForCausalLM",
         "modeling_mimo_v2_flash.MiMoV2FlashForCausalLM"}};
  }
  if (f == HfFamily::kKimiK2) {
    (*j)["auto_map"] = {
        {"AutoConfig", "configuration_deepseek.DeepseekV3Config"},
        {"AutoModelForCausalLM", "modeling_deepseek.DeepseekV3ForCausalLM"}};
  }
}

// The DeepSeek-style families described by difference or by their own
// keys, as their releases write config.json (layer 0 dense where the family
// has dense layers). The multimodal ones get their text_config's keys here
// and are wrapped by HfConfigJson.
void DeepseekStyleKeys(const MoeLayerConfig& c, HfFamily f, int64_t num_layers,
                       json* j) {
  const int64_t groups = c.n_groups > 0 ? c.n_groups : 1;
  const int64_t kept = c.n_groups > 0 ? c.topk_groups : 1;
  const char* score =
      c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
  switch (f) {
    case HfFamily::kDeepseek:
      // deepseek-moe-16b: no topk_method, groups or routed_scaling_factor.
      (*j)["n_routed_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["n_shared_experts"] = c.shared_inter / c.inter;
      (*j)["norm_topk_prob"] = c.route_norm;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["moe_layer_freq"] = 1;
      (*j)["scoring_func"] = "softmax";
      (*j)["aux_loss_alpha"] = 0.001;
      (*j)["seq_aux"] = true;
      break;
    case HfFamily::kDeepseekV32:
      DeepseekKeys(c, HfFamily::kDeepseekV3, num_layers, j);
      (*j)["index_topk"] = 2048;
      (*j)["index_n_heads"] = 64;
      (*j)["index_head_dim"] = 128;
      break;
    case HfFamily::kDots1:
      // dots.llm1's release: scoring_func beside DeepSeek-V3's keys, no
      // topk_method or moe_layer_freq.
      (*j)["n_routed_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["n_shared_experts"] = c.shared_inter / c.inter;
      (*j)["norm_topk_prob"] = c.route_norm;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["scoring_func"] = "sigmoid";
      if (c.n_groups > 1) {
        (*j)["n_group"] = groups;
        (*j)["topk_group"] = kept;
      } else {
        (*j)["n_group"] = nullptr;  // null in the release
        (*j)["topk_group"] = nullptr;
      }
      break;
    case HfFamily::kGlm4MoeLite:
    case HfFamily::kSolarOpen:
    case HfFamily::kGlm4vMoe:
      DeepseekKeys(c, HfFamily::kGlm4Moe, num_layers, j);
      if (f == HfFamily::kGlm4MoeLite) {
        (*j)["mlp_layer_types"] = json::array();
        for (int64_t l = 0; l < num_layers; ++l) {
          (*j)["mlp_layer_types"].push_back(l == 0 ? "dense" : "sparse");
        }
        (*j)["kv_lora_rank"] = 512;
        (*j)["q_lora_rank"] = 768;
      }
      if (f == HfFamily::kSolarOpen) {
        // Every layer MoE: no first_k_dense_replace, no dense MLP width.
        j->erase("first_k_dense_replace");
        j->erase("intermediate_size");
        j->erase("num_nextn_predict_layers");
      }
      break;
    case HfFamily::kKimiVl:
    case HfFamily::kKimiK25:
      DeepseekKeys(c, HfFamily::kDeepseekV3, num_layers, j);
      break;
    case HfFamily::kKimiLinear:
      j->erase("num_experts_per_tok");
      (*j)["num_experts"] = c.num_experts;
      (*j)["num_experts_per_token"] = c.top_k;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["moe_router_activation_func"] = score;
      (*j)["moe_renormalize"] = c.route_norm;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["use_grouped_topk"] = true;
      (*j)["num_expert_group"] = groups;
      (*j)["topk_group"] = kept;
      (*j)["hidden_act"] = "silu";
      (*j)["first_k_dense_replace"] = 1;
      (*j)["moe_layer_freq"] = 1;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["linear_attn_config"] = {{"full_attn_layers", {num_layers}},
                                    {"kda_layers", json::array()},
                                    {"head_dim", 16},
                                    {"num_heads", 4}};
      for (int64_t l = 1; l < num_layers; ++l) {
        (*j)["linear_attn_config"]["kda_layers"].push_back(l);
      }
      break;
    case HfFamily::kBailingMoe:
      // Ling-lite: every layer MoE.
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["norm_topk_prob"] = c.route_norm;
      (*j)["use_qkv_bias"] = false;
      break;
    case HfFamily::kBailingMoeV2:
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["score_function"] = "sigmoid";
      (*j)["moe_router_enable_expert_bias"] = true;
      (*j)["n_group"] = groups;
      (*j)["topk_group"] = kept;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["norm_topk_prob"] = true;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["use_qkv_bias"] = false;
      break;
    case HfFamily::kHyV3:
      // Hy3-preview's Hub config: the routed width as expert_hidden_dim
      // (the key vLLM reads), route_norm beside the keys transformers
      // reads, layer 0 dense by first_k_dense_replace, one MTP layer.
      (*j)["num_experts"] = c.num_experts;
      (*j)["expert_hidden_dim"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["router_scaling_factor"] = c.route_scale;
      (*j)["route_norm"] = true;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["num_nextn_predict_layers"] = 1;
      (*j)["hidden_act"] = "silu";
      (*j)["qk_norm"] = true;
      (*j)["enable_moe_fp32_combine"] = false;
      break;
    case HfFamily::kBailingMoeV3: {
      // Ling-3.0's config: Ling 2.0's keys, the shared expert's own width,
      // the per-layer swiglustep limits (the case's on the MoE layers, null
      // on the dense one and on the MTP layer), one MTP layer, the hybrid
      // attention's keys.
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter > 0 ? 1 : 0;
      (*j)["moe_shared_expert_intermediate_size"] =
          c.shared_inter > 0 ? c.shared_inter : c.inter;
      (*j)["score_function"] = "sigmoid";
      (*j)["scoring_func"] = "sigmoid";
      (*j)["topk_method"] = "noaux_tc";
      (*j)["moe_router_enable_expert_bias"] = true;
      (*j)["router_dtype"] = "fp32";
      (*j)["n_group"] = groups;
      (*j)["topk_group"] = kept;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["norm_topk_prob"] = true;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["num_nextn_predict_layers"] = 1;
      (*j)["layer_group_size"] = 4;
      (*j)["kv_lora_rank"] = 512;
      (*j)["pregate_enabled"] = true;
      (*j)["pregate_inference"] = false;
      json routed = json::array(), shared = json::array();
      for (int64_t l = 0; l <= num_layers; ++l) {
        const bool moe = l > 0 && l < num_layers;
        const bool step = c.act == Activation::kSwigluStep;
        const bool shared_step =
            c.shared_activation() == Activation::kSwigluStep;
        routed.push_back(moe ? json(step ? c.act_limit : 0.0f) : json(nullptr));
        shared.push_back(moe ? json(shared_step ? c.shared_limit() : 0.0f)
                             : json(nullptr));
      }
      (*j)["expert_swiglu_limit_list"] = routed;
      (*j)["share_expert_swiglu_limit_list"] = shared;
      break;
    }
    case HfFamily::kAfmoe:
      // Trinity's config: score_func, route_norm and groups beside the
      // keys transformers reads.
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["route_scale"] = c.route_scale;
      (*j)["score_func"] = "sigmoid";
      (*j)["route_norm"] = true;
      (*j)["n_group"] = 1;
      (*j)["topk_group"] = 1;
      (*j)["num_dense_layers"] = 1;
      (*j)["hidden_act"] = "silu";
      (*j)["mup_enabled"] = true;
      break;
    case HfFamily::kLfm2Moe:
    case HfFamily::kLfm2Vl:
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["norm_topk_prob"] = c.route_norm;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["use_expert_bias"] = c.use_bias;
      (*j)["num_dense_layers"] = 1;
      (*j)["full_attn_idxs"] = {1};
      break;
    case HfFamily::kExaoneMoe:
      // K-EXAONE's config: the layer list, and swiglu_limits 0 (no clamp)
      // or the case's silu_clamp limit on every layer.
      (*j)["num_experts"] = c.num_experts;
      (*j)["moe_intermediate_size"] = c.inter;
      (*j)["intermediate_size"] = 2 * c.hidden;
      (*j)["num_shared_experts"] = c.shared_inter / c.inter;
      (*j)["norm_topk_prob"] = c.route_norm;
      (*j)["routed_scaling_factor"] = c.route_scale;
      (*j)["n_group"] = groups;
      (*j)["topk_group"] = kept;
      (*j)["first_k_dense_replace"] = 1;
      (*j)["hidden_act"] = "silu";
      (*j)["mlp_layer_types"] = json::array();
      (*j)["swiglu_limits"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        (*j)["mlp_layer_types"].push_back(l == 0 ? "dense" : "sparse");
        (*j)["swiglu_limits"].push_back(
            c.act == Activation::kSiluClamp ? c.act_limit : 0.0f);
      }
      break;
    default:
      break;
  }
}

// The keys Step-3 and Step-3.5 share: moe_* sizes, the share_expert's
// width, renorm, and layer 0 dense with the others listed in
// moe_layers_enum as the releases write it.
void AddStepKeys(const MoeLayerConfig& c, int64_t num_layers, json* j) {
  j->erase("num_experts_per_tok");
  (*j)["moe_top_k"] = c.top_k;
  (*j)["moe_num_experts"] = c.num_experts;
  (*j)["moe_intermediate_size"] = c.inter;
  (*j)["share_expert_dim"] = c.shared_inter;
  (*j)["intermediate_size"] = 2 * c.hidden;
  (*j)["norm_expert_weight"] = c.route_norm;
  std::string layers;
  for (int64_t l = 1; l < num_layers; ++l) {
    absl::StrAppend(&layers, l == 1 ? "" : ",", l);
  }
  (*j)["moe_layers_enum"] = layers;
}

}  // namespace

std::string HfConfigJson(const MoeLayerConfig& c, HfFamily f,
                         int64_t num_layers) {
  json j;
  j["model_type"] = HfFamilyName(f);
  j["architectures"] = {Architecture(f)};
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = num_layers;
  j["num_experts_per_tok"] = c.top_k;
  j["vocab_size"] = kVocab;
  j["num_attention_heads"] = 4;
  switch (f) {
    case HfFamily::kMixtral:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      break;
    case HfFamily::kOlmoe:
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["norm_topk_prob"] = c.route_norm;
      break;
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
    case HfFamily::kQwen3Next:
      j["num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["norm_topk_prob"] = c.route_norm;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = {0};
      if (f != HfFamily::kQwen3Moe) {
        j["shared_expert_intermediate_size"] = c.shared_inter;
      }
      break;
    case HfFamily::kQwen35Moe:
      // No norm_topk_prob (always renormalised), every layer sparse.
      j["num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["shared_expert_intermediate_size"] = c.shared_inter;
      j["layer_types"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        j["layer_types"].push_back(l % 4 == 3 ? "full_attention"
                                              : "linear_attention");
      }
      break;
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3:
    case HfFamily::kKimiK2:
    case HfFamily::kGlm4Moe:
    case HfFamily::kGlmMoeDsa:
    case HfFamily::kMimoV2Flash:
      DeepseekKeys(c, f, num_layers, &j);
      break;
    case HfFamily::kMinimaxM2:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["scoring_func"] = "sigmoid";
      j["use_routing_bias"] = true;
      break;
    case HfFamily::kLlama4:
    case HfFamily::kLlama4Text: {
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["intermediate_size_mlp"] = 2 * c.hidden;
      if (f == HfFamily::kLlama4) {
        j["moe_layers"] = json::array();
        for (int64_t l = 1; l < num_layers; l += 2)
          j["moe_layers"].push_back(l);
      } else {
        j["interleave_moe_layer_step"] = 2;
      }
      break;
    }
    case HfFamily::kErnie45Moe:
      j.erase("num_experts_per_tok");
      j["moe_k"] = c.top_k;
      j["moe_num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["moe_num_shared_experts"] = c.shared_inter / c.inter;
      j["moe_norm_min"] = c.norm_min;
      j["moe_layer_start_index"] = 1;
      j["moe_layer_end_index"] = -1;
      j["moe_layer_interval"] = 1;
      j["use_bias"] = false;
      break;
    case HfFamily::kErnie45VlMoe:
      // The release's [text, vision] pairs; its end indices run past the
      // last layer (28 layers, [29, 28]).
      j.erase("num_experts_per_tok");
      j["moe_k"] = c.top_k;
      j["moe_num_experts"] = {c.num_experts, c.num_experts};
      j["moe_intermediate_size"] = {c.inter, ErnieVlVisionInter(c)};
      j["intermediate_size"] = 2 * c.hidden;
      j["moe_num_shared_experts"] = c.shared_inter / c.inter;
      j["moe_norm_min"] = c.norm_min;
      j["moe_layer_start_index"] = {1, 1};
      j["moe_layer_end_index"] = {num_layers + 1, num_layers};
      j["moe_layer_interval"] = 1;
      j["use_bias"] = false;
      j["im_patch_id"] = 100295;
      j["vision_config"] = {{"depth", 2}, {"hidden_size", 48}};
      break;
    case HfFamily::kGptOss:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["swiglu_limit"] = c.act_limit;
      break;
    case HfFamily::kDeepseekV4:
      j["n_routed_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["n_shared_experts"] = c.shared_inter / c.inter;
      j["scoring_func"] = "sqrtsoftplus";
      j["routed_scaling_factor"] = c.route_scale;
      j["swiglu_limit"] = c.act_limit;
      j["num_hash_layers"] = c.hash_routed() ? num_layers : 0;
      if (c.hash_routed()) j["vocab_size"] = c.hash_vocab;
      break;
    case HfFamily::kNemotronH: {
      j["n_routed_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["moe_shared_expert_intermediate_size"] = c.shared_inter;
      j["moe_latent_size"] =
          c.latent > 0 ? json(c.latent) : json(nullptr);  // null: no latent
      j["mlp_hidden_act"] = c.act == Activation::kRelu2 ? "relu2" : "silu";
      j["mlp_bias"] = c.latent_bias;
      j["n_group"] = c.n_groups > 0 ? c.n_groups : 1;
      j["topk_group"] = c.topk_groups > 0 ? c.topk_groups : 1;
      j["norm_topk_prob"] = c.route_norm;
      j["routed_scaling_factor"] = c.route_scale;
      j["intermediate_size"] = 2 * c.hidden;
      j["num_nextn_predict_layers"] = 1;
      std::string pattern;
      for (int64_t l = 0; l < num_layers; ++l) {
        pattern += NemotronLayerKind(l);
      }
      j["hybrid_override_pattern"] = pattern;
      break;
    }
    case HfFamily::kGemma4:
    case HfFamily::kGemma4Text:
      j.erase("num_experts_per_tok");
      j["enable_moe_block"] = true;
      j["num_experts"] = c.num_experts;
      j["top_k_experts"] = c.top_k;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = c.shared_inter;
      j["hidden_activation"] =
          c.act == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu";
      j["rms_norm_eps"] = c.norm_eps;
      break;
    case HfFamily::kKimiK3:
      j.erase("num_experts_per_tok");
      j["num_experts"] = c.num_experts;
      j["num_experts_per_token"] = c.top_k;
      j["moe_intermediate_size"] = c.inter;
      j["num_shared_experts"] = c.shared_inter / c.inter;
      j["routed_expert_hidden_size"] = c.latent;
      j["latent_moe_use_norm"] = c.latent_norm;
      j["moe_router_activation_func"] =
          c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
      j["moe_renormalize"] = c.route_norm;
      j["routed_scaling_factor"] = c.route_scale;
      j["use_grouped_topk"] = c.n_groups > 1;
      j["num_expert_group"] = c.n_groups > 0 ? c.n_groups : 1;
      j["topk_group"] = c.topk_groups > 0 ? c.topk_groups : 1;
      j["hidden_act"] = c.act == Activation::kSitu ? "situ" : "silu";
      j["activation_situ_beta"] = c.act_beta;
      j["activation_situ_linear_beta"] = c.act_linear_beta;
      j["rms_norm_eps"] = c.norm_eps;
      j["first_k_dense_replace"] = 1;
      j["moe_layer_freq"] = 1;
      j["intermediate_size"] = 2 * c.hidden;
      break;
    case HfFamily::kFlexOlmo:
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["norm_topk_prob"] = c.route_norm;
      break;
    case HfFamily::kMellum:
      // Layer 0 dense, by the per-layer list (no decoder_sparse_step).
      j["num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["norm_topk_prob"] = c.route_norm;
      j["mlp_layer_types"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        j["mlp_layer_types"].push_back(l == 0 ? "dense" : "sparse");
      }
      j["layer_types"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        j["layer_types"].push_back(l % 2 == 0 ? "sliding_attention"
                                              : "full_attention");
      }
      break;
    case HfFamily::kMinimax:
    case HfFamily::kMinimaxVl01:
      // Lightning and softmax attention layers (attn_type_list), which the
      // MoE service ignores.
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["attn_type_list"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        j["attn_type_list"].push_back(l % 2);
      }
      j["shared_intermediate_size"] = 0;
      break;
    case HfFamily::kQwen3VlMoe:
    case HfFamily::kQwen3OmniMoe:
    case HfFamily::kInternS1:
    case HfFamily::kInternVl:
    case HfFamily::kInternVlChat:
    case HfFamily::kOvis26Moe:
      j["num_experts"] = c.num_experts;
      j["moe_intermediate_size"] = c.inter;
      j["intermediate_size"] = 2 * c.hidden;
      j["norm_topk_prob"] = c.route_norm;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = {0};
      break;
    case HfFamily::kGraniteMoe:
    case HfFamily::kGraniteMoeShared:
    case HfFamily::kGraniteMoeHybrid:
    case HfFamily::kGraniteMoeSwa:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["embedding_multiplier"] = 12.0;
      j["residual_multiplier"] = 0.22;
      if (f != HfFamily::kGraniteMoe) {
        j["shared_intermediate_size"] = c.shared_inter;
      }
      if (f == HfFamily::kGraniteMoeHybrid) {
        j["layers_block_type"] = json::array();
        for (int64_t l = 0; l < num_layers; ++l) {
          j["layers_block_type"].push_back(l % 2 == 0 ? "mamba" : "attention");
        }
      }
      break;
    case HfFamily::kMinicpm:
      // MiniCPM-MoE-8x2B's remote-code config: num_experts, the expert
      // width as intermediate_size, and the muP scales the host applies.
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["scale_emb"] = 12;
      j["dim_model_base"] = 256;
      j["scale_depth"] = 1.4;
      j["auto_map"] = {
          {"AutoConfig", "configuration_minicpm.MiniCPMConfig"},
          {"AutoModelForCausalLM", "modeling_minicpm.MiniCPMForCausalLM"}};
      break;
    case HfFamily::kArctic:
      // Every second layer MoE: layers 1, 3, ...
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["moe_layer_frequency"] = 2;
      break;
    case HfFamily::kAria:
      j.erase("num_experts_per_tok");
      j["moe_num_experts"] = c.num_experts;
      j["moe_topk"] = c.top_k;
      j["intermediate_size"] = c.inter;
      j["moe_num_shared_experts"] = c.shared_inter / c.inter;
      break;
    case HfFamily::kJamba:
      // MoE on odd layers, attention every fourth (attn_layer_period),
      // Mamba elsewhere.
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["expert_layer_period"] = 2;
      j["expert_layer_offset"] = 1;
      j["attn_layer_period"] = 4;
      j["attn_layer_offset"] = 2;
      break;
    case HfFamily::kDbrx:
      // DBRX's own spellings and its MoE keys in ffn_config.
      j.erase("hidden_size");
      j.erase("num_hidden_layers");
      j.erase("num_experts_per_tok");
      j.erase("num_attention_heads");
      j["d_model"] = c.hidden;
      j["n_layers"] = num_layers;
      j["n_heads"] = 4;
      j["attn_config"] = {{"kv_n_heads", 2}, {"clip_qkv", 8}};
      j["ffn_config"] = {{"moe_num_experts", c.num_experts},
                         {"moe_top_k", c.top_k},
                         {"ffn_hidden_size", c.inter},
                         {"ffn_act_fn", {{"name", "silu"}}},
                         {"moe_jitter_eps", 0}};
      if (c.route_norm) {
        j["ffn_config"]["moe_normalize_expert_weights"] = 1;
      } else {
        j["ffn_config"]["moe_normalize_expert_weights"] = nullptr;
      }
      break;
    case HfFamily::kHunyuanV1Moe: {
      // Hunyuan-A13B's per-layer lists, one value on every layer.
      j.erase("num_experts_per_tok");
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["use_mixed_mlp_moe"] = true;
      j["moe_topk"] = json::array();
      j["moe_intermediate_size"] = json::array();
      j["num_shared_expert"] = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        j["moe_topk"].push_back(c.top_k);
        j["moe_intermediate_size"].push_back(c.inter);
        j["num_shared_expert"].push_back(1);
      }
      break;
    }
    case HfFamily::kDeepseek:
    case HfFamily::kDeepseekV32:
    case HfFamily::kDots1:
    case HfFamily::kGlm4MoeLite:
    case HfFamily::kSolarOpen:
    case HfFamily::kKimiLinear:
    case HfFamily::kBailingMoe:
    case HfFamily::kBailingMoeV2:
    case HfFamily::kGlm4vMoe:
    case HfFamily::kKimiVl:
    case HfFamily::kKimiK25:
    case HfFamily::kAfmoe:
    case HfFamily::kLfm2Moe:
    case HfFamily::kLfm2Vl:
    case HfFamily::kExaoneMoe:
    case HfFamily::kHyV3:
    case HfFamily::kBailingMoeV3:
      DeepseekStyleKeys(c, f, num_layers, &j);
      break;
    case HfFamily::kPhimoe:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["router_jitter_noise"] = c.jitter_eps;
      j["input_jitter_noise"] = 0.0;
      j["attention_bias"] = true;
      j["lm_head_bias"] = true;
      break;
    case HfFamily::kLongcatFlash:
      // num_hidden_layers counts the two sublayers of each layer.
      j.erase("num_experts_per_tok");
      j["num_layers"] = num_layers;
      j["num_hidden_layers"] = 2 * num_layers;
      j["n_routed_experts"] = c.num_experts;
      j["zero_expert_num"] = c.zero_experts;
      j["zero_expert_type"] = "identity";
      j["moe_topk"] = c.top_k;
      j["expert_ffn_hidden_size"] = c.inter;
      j["ffn_hidden_size"] = 2 * c.hidden;
      j["routed_scaling_factor"] = c.route_scale;
      j["router_bias"] = false;
      j["kv_lora_rank"] = c.hidden;
      break;
    case HfFamily::kCohere2Moe:
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["num_shared_experts"] = c.shared_inter / c.inter;
      j["expert_selection_fn"] =
          c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
      // The release's default; a softmax over the k ignores it.
      j["norm_topk_prob"] =
          c.score_func == ScoreFunc::kSigmoid ? c.route_norm : true;
      j["shared_expert_combination_strategy"] =
          c.output_scale == 0.5f ? "average" : "sum";
      j["first_k_dense_replace"] = 1;
      j["prefix_dense_intermediate_size"] = 2 * c.hidden;
      j["tie_word_embeddings"] = true;
      break;
    case HfFamily::kGrok1:
      // hpcai-tech's conversion: num_experts, the soft-cap, no renorm key
      // (residual_moe false renormalises).
      j["num_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["router_logit_softcapping"] = c.router_softcap;
      j["residual_moe"] = false;
      j["attn_output_multiplier"] = 0.08838834764831845;
      j["max_attn_value"] = 30.0;
      j["tie_word_embeddings"] = true;
      break;
    case HfFamily::kJetMoe:
      j["num_local_experts"] = c.num_experts;
      j["intermediate_size"] = c.inter;
      j["activation_function"] = "silu";
      j["kv_channels"] = c.hidden / 4;
      break;
    case HfFamily::kStep3p5: {
      // The MoE layers with the case's limits (0: plain silu); the dense
      // layer's entries null, as a release may say.
      AddStepKeys(c, num_layers, &j);
      j["moe_router_activation"] =
          c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "softmax";
      j["use_moe_router_bias"] = true;
      j["need_fp32_gate"] = true;
      j["moe_router_scaling_factor"] = c.route_scale;
      j["num_nextn_predict_layers"] = 1;
      json routed = json::array(), shared = json::array();
      for (int64_t l = 0; l < num_layers; ++l) {
        const bool step = c.act == Activation::kSwigluStep;
        const bool shared_step =
            c.shared_activation() == Activation::kSwigluStep;
        routed.push_back(l == 0 ? json(nullptr)
                                : json(step ? c.act_limit : 0.0f));
        shared.push_back(l == 0 ? json(nullptr)
                                : json(shared_step ? c.shared_limit() : 0.0f));
      }
      j["swiglu_limits"] = routed;
      j["swiglu_limits_shared"] = shared;
      break;
    }
    case HfFamily::kStep3Text:
    case HfFamily::kStep3Vl:
      AddStepKeys(c, num_layers, &j);
      j["share_q_dim"] = c.hidden / 2;
      j["head_dim"] = c.hidden / 4;
      break;
  }
  if (c.capacity_factor > 0) j["moe_capacity_factor"] = c.capacity_factor;
  if (c.routing == RoutingMode::kExpertChoice)
    j["moe_routing"] = "expert_choice";
  if (c.score_before_experts) j["moe_score_before_experts"] = true;
  // The 2026 options in the generic form (core/hf_config.cc
  // ReadExtensions), for the families whose own config cannot say them;
  // the 2026 families say theirs in their own keys.
  if (Pre2026(f)) {
    if (c.score_func == ScoreFunc::kSqrtSoftplus ||
        c.score_func == ScoreFunc::kTopkSoftmax) {
      j["moe_score_func"] = ScoreFuncName(c.score_func);
    }
    if (c.has_2026_options()) {
      j["moe_use_bias"] = c.use_bias;
      j["moe_router_bias"] = c.router_bias;
      j["moe_expert_bias"] = c.expert_bias;
      j["moe_act"] = ActivationName(c.act);
      j["moe_act_alpha"] = c.act_alpha;
      j["moe_act_limit"] = c.act_limit;
      j["moe_norm_min"] = c.norm_min;
      j["moe_hash_vocab"] = c.hash_vocab;
    }
  }
  if (f == HfFamily::kLlama4) {
    // The multimodal config: the language model's keys under text_config.
    j["model_type"] = "llama4_text";
    j.erase("architectures");
    json top = {{"model_type", "llama4"},
                {"architectures", {Architecture(f)}},
                {"text_config", j},
                {"vision_config", {{"hidden_size", 48}}}};
    return top.dump(2);
  }
  if (f == HfFamily::kGemma4 || f == HfFamily::kKimiK3) {
    // Multimodal: the language model's keys under text_config (Kimi K3's
    // says kimi_linear).
    j["model_type"] = f == HfFamily::kGemma4 ? "gemma4_text" : "kimi_linear";
    j.erase("architectures");
    json top = {{"model_type", HfFamilyName(f)},
                {"architectures", {Architecture(f)}},
                {"text_config", j},
                {"vision_config", {{"hidden_size", 48}}}};
    return top.dump(2);
  }
  if (f == HfFamily::kQwen3OmniMoe) {
    // The thinker's language model two levels down; the talker (another
    // MoE, not served) and the audio tower beside it.
    j["model_type"] = "qwen3_omni_moe_text";
    j.erase("architectures");
    json talker_text = {{"model_type", "qwen3_omni_moe_talker_text"},
                        {"hidden_size", 32},
                        {"num_hidden_layers", 1},
                        {"num_experts", 4},
                        {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 8}};
    json top = {{"model_type", "qwen3_omni_moe"},
                {"architectures", {Architecture(f)}},
                {"thinker_config",
                 {{"model_type", "qwen3_omni_moe_thinker"},
                  {"text_config", j},
                  {"audio_config", {{"d_model", 48}}},
                  {"vision_config", {{"hidden_size", 48}}}}},
                {"talker_config", {{"text_config", talker_text}}},
                {"enable_audio_output", true}};
    return top.dump(2);
  }
  if (f == HfFamily::kStep3Vl || f == HfFamily::kMinimaxVl01 ||
      f == HfFamily::kInternS1 || f == HfFamily::kInternVl ||
      f == HfFamily::kLfm2Vl || f == HfFamily::kInternVlChat ||
      f == HfFamily::kOvis26Moe) {
    // The wrappers: the language model's config (of its own model_type and
    // class) under text_config, or llm_config for InternVLChatModel and
    // Ovis, beside a vision config.
    const bool qwen = f == HfFamily::kInternS1 || f == HfFamily::kInternVl ||
                      f == HfFamily::kInternVlChat || f == HfFamily::kOvis26Moe;
    j["model_type"] = qwen                          ? "qwen3_moe"
                      : f == HfFamily::kStep3Vl     ? "step3_text"
                      : f == HfFamily::kMinimaxVl01 ? "minimax_text_01"
                                                    : "lfm2_moe";
    j["architectures"] = {qwen                      ? "Qwen3MoeForCausalLM"
                          : f == HfFamily::kStep3Vl ? "Step3TextForCausalLM"
                          : f == HfFamily::kMinimaxVl01
                              ? "MiniMaxText01ForCausalLM"
                              : "Lfm2MoeForCausalLM"};
    const bool llm = f == HfFamily::kInternVlChat || f == HfFamily::kOvis26Moe;
    json top = {
        {"model_type", HfFamilyName(f)},
        {"architectures", {Architecture(f)}},
        {llm ? "llm_config" : "text_config", j},
        {"vision_config", {{"hidden_size", 48}, {"num_hidden_layers", 1}}}};
    return top.dump(2);
  }
  if (f == HfFamily::kQwen3VlMoe || f == HfFamily::kAria) {
    j["model_type"] =
        f == HfFamily::kQwen3VlMoe ? "qwen3_vl_moe_text" : "aria_text";
    j.erase("architectures");
    json top = {{"model_type", HfFamilyName(f)},
                {"architectures", {Architecture(f)}},
                {"text_config", j},
                {"vision_config", {{"hidden_size", 48}, {"depth", 1}}}};
    return top.dump(2);
  }
  if (f == HfFamily::kGlm4vMoe || f == HfFamily::kKimiVl ||
      f == HfFamily::kKimiK25) {
    // Multimodal: the language model's keys under text_config, of the
    // model_type each release names there.
    j["model_type"] = f == HfFamily::kGlm4vMoe  ? "glm4v_moe_text"
                      : f == HfFamily::kKimiK25 ? "kimi_k2"
                                                : "deepseek_v3";
    j.erase("architectures");
    json top = {{"model_type", HfFamilyName(f)},
                {"architectures", {Architecture(f)}},
                {"text_config", j},
                {"vision_config", {{"hidden_size", 48}}}};
    return top.dump(2);
  }
  if (f == HfFamily::kQwen35Moe) {
    j["model_type"] = "qwen3_5_moe_text";
    j.erase("architectures");
    json top = {{"model_type", "qwen3_5_moe"},
                {"architectures", {Architecture(f)}},
                {"text_config", j},
                {"vision_config", {{"hidden_size", 48}, {"depth", 1}}},
                {"tie_word_embeddings", false}};
    return top.dump(2);
  }
  return j.dump(2);
}

namespace {

// Mistral's own layout (params.json, consolidated shards), its names
// spelled here as mistral-inference's modules and vLLM's Mistral-Large-3
// remap give them, not taken from the loader's tables.
absl::StatusOr<std::string> MistralParamsJson(const MoeLayerConfig& c,
                                              HfFamily f, int64_t num_layers) {
  json j = {{"dim", c.hidden},      {"n_layers", num_layers},
            {"head_dim", 16},       {"n_heads", 4},
            {"n_kv_heads", 2},      {"norm_eps", 1e-5},
            {"vocab_size", kVocab}, {"rope_theta", 1000000.0}};
  if (f == HfFamily::kMixtral) {
    j["hidden_dim"] = c.inter;  // Mixtral's experts are the FFN's width
    j["moe"] = {{"num_experts", c.num_experts},
                {"num_experts_per_tok", c.top_k}};
    return j.dump(2);
  }
  if (f != HfFamily::kDeepseekV3 || c.shared_inter % c.inter != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Mistral's layout is written for mixtral and for deepseek_v3 "
        "(Mistral-Large-3, shared experts of the routed width), not ",
        HfFamilyName(f)));
  }
  // Mistral-Large-3: MLA attention, llama-4 scaling, layer 0 dense.
  j["hidden_dim"] = 2 * c.hidden;
  j["q_lora_rank"] = 16;
  j["kv_lora_rank"] = 16;
  j["qk_nope_head_dim"] = 16;
  j["qk_rope_head_dim"] = 8;
  j["v_head_dim"] = 16;
  j["llama_4_scaling"] = {{"original_max_position_embeddings", 8192},
                          {"beta", 0.1}};
  // Released with Pixtral's vision encoder, which the loader skips.
  j["vision_encoder"] = {{"hidden_size", 48},
                         {"num_hidden_layers", 1},
                         {"image_size", 64},
                         {"patch_size", 16}};
  j["moe"] = {
      {"num_experts", c.num_experts},
      {"num_experts_per_tok", c.top_k},
      {"expert_hidden_dim", c.inter},
      {"num_shared_experts", c.shared_inter / c.inter},
      {"routed_scale", c.route_scale},
      {"num_expert_groups", std::max<int64_t>(1, c.n_groups)},
      {"num_expert_groups_per_tok", std::max<int64_t>(1, c.topk_groups)},
      {"first_k_dense_replace", 1},
      {"route_every_n", 1},
      {"renorm_strategy", "WEIGHTS"},
      {"use_load_balancing_bias", false}};
  return j.dump(2);
}

// One MoE layer under Mistral's names: Mixtral's feed_forward.gate and
// feed_forward.experts.{e}.w1/w3/w2, Mistral-Large-3's gate, experts.{e}.*
// and shared_experts.* at the layer level.
void AddMistralMoeLayer(const GoldenCase& c, HfFamily f, int64_t layer,
                        bool golden, uint64_t seed, std::vector<Tensor>* out) {
  const MoeLayerConfig& k = c.config;
  const int64_t E = k.num_experts, H = k.hidden, I = k.inter,
                S = k.shared_inter;
  auto values = [&](const std::vector<float>& src, int64_t begin, int64_t count,
                    uint64_t salt) {
    return golden ? Slice(src, begin, count) : Filler(seed + salt, count, 0.2f);
  };
  const std::string p = absl::StrCat(
      "layers.", layer, f == HfFamily::kMixtral ? ".feed_forward." : ".");
  out->push_back({p + "gate.weight", {E, H}, values(c.gate, 0, E * H, 1)});
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = absl::StrCat(p, "experts.", e, ".");
    out->push_back(
        {x + "w1.weight", {I, H}, values(c.w1, e * I * H, I * H, 10 + e)});
    out->push_back(
        {x + "w3.weight", {I, H}, values(c.w3, e * I * H, I * H, 1000 + e)});
    out->push_back(
        {x + "w2.weight", {H, I}, values(c.w2, e * I * H, I * H, 2000 + e)});
  }
  if (S > 0) {
    out->push_back(
        {p + "shared_experts.w1.weight", {S, H}, values(c.sw1, 0, S * H, 3)});
    out->push_back(
        {p + "shared_experts.w3.weight", {S, H}, values(c.sw3, 0, S * H, 4)});
    out->push_back(
        {p + "shared_experts.w2.weight", {H, S}, values(c.sw2, 0, S * H, 5)});
  }
}

// The tensors around the MoE layers, which the loader must skip: the
// embedding, attention (Mistral-Large-3's MLA), norms, dense FFNs, output.
void AddMistralUnrelated(HfFamily f, int64_t H, int64_t layer, uint64_t seed,
                         bool dense, std::vector<Tensor>* out) {
  const std::string p = absl::StrCat("layers.", layer, ".");
  const std::vector<const char*> attention =
      f == HfFamily::kMixtral
          ? std::vector<const char*>{"wq", "wk", "wv", "wo"}
          : std::vector<const char*>{"wq_a", "wq_b", "wkv_a_with_mqa", "wkv_b",
                                     "wo"};
  for (const char* w : attention) {
    out->push_back({absl::StrCat(p, "attention.", w, ".weight"),
                    {H, H},
                    Filler(seed + layer * 7 + w[1], H * H, 0.1f)});
  }
  if (f != HfFamily::kMixtral) {
    for (const char* n : {"q_a_norm", "kv_a_norm"}) {
      out->push_back({absl::StrCat(p, "attention.", n, ".weight"),
                      {H},
                      std::vector<float>(H, 1.0f)});
    }
  }
  out->push_back(
      {p + "attention_norm.weight", {H}, std::vector<float>(H, 1.0f)});
  out->push_back({p + "ffn_norm.weight", {H}, std::vector<float>(H, 1.0f)});
  if (dense) {
    const std::string m = p + "feed_forward.";
    out->push_back(
        {m + "w1.weight", {2 * H, H}, Filler(seed + 91, 2 * H * H, 0.1f)});
    out->push_back(
        {m + "w3.weight", {2 * H, H}, Filler(seed + 92, 2 * H * H, 0.1f)});
    out->push_back(
        {m + "w2.weight", {H, 2 * H}, Filler(seed + 93, 2 * H * H, 0.1f)});
  }
}

// Writes `tensors` round-robin into `shards` files named by `shard_name`,
// each tensor stored as `dtype_of` says (raw bytes and integer ids as they
// are), with the JSON index `index_file` naming every tensor's file when
// `write_index`. Both layouts (Hugging Face's, Mistral's) write this way.
absl::Status WriteShards(const std::vector<Tensor>& tensors, int shards,
                         const std::function<std::string(int)>& shard_name,
                         const std::function<DType(const Tensor&)>& dtype_of,
                         bool write_index, const std::string& index_file,
                         const std::string& dir) {
  std::vector<SafetensorsWriter> writers(shards);
  json weight_map = json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const int s = static_cast<int>(i % shards);
    const DType dtype = dtype_of(t);
    std::vector<std::byte> bytes(t.values.size() * DTypeSize(dtype));
    if (!t.raw.empty()) {
      bytes.resize(t.raw.size());
      std::memcpy(bytes.data(), t.raw.data(), t.raw.size());
    } else if (dtype == DType::kI32) {
      for (size_t j = 0; j < t.values.size(); ++j) {
        const int32_t id = static_cast<int32_t>(t.values[j]);
        std::memcpy(bytes.data() + 4 * j, &id, 4);
      }
    } else if (!ConvertFromF32(dtype, t.values.data(), t.values.size(),
                               bytes.data())) {
      return absl::InvalidArgumentError(
          "storage dtype must be F32, BF16 or F16");
    }
    writers[s].Add(t.name, dtype, t.shape, bytes.data(), bytes.size());
    weight_map[t.name] = shard_name(s);
  }
  for (int s = 0; s < shards; ++s) {
    writers[s].SetMetadata("format", "pt");
    MOE_RETURN_IF_ERROR(
        writers[s].WriteFile((fs::path(dir) / shard_name(s)).string()));
  }
  if (write_index) {
    MOE_RETURN_IF_ERROR(WriteJson(
        fs::path(dir) / index_file,
        {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteMistralCheckpoint(const GoldenCase& c,
                                    const HfWriteOptions& o,
                                    const std::string& dir) {
  const MoeLayerConfig& k = c.config;
  const int64_t H = k.hidden;
  const int64_t num_layers = o.layer + 2;
  if (o.released || o.nvfp4_experts || o.hash_case != nullptr) {
    return absl::InvalidArgumentError(
        "Mistral's layout is written unquantised and top-k only");
  }
  MOE_ASSIGN_OR_RETURN(const std::string params,
                       MistralParamsJson(k, o.family, num_layers));
  // The params.json written must say the case exactly, as read back.
  MOE_ASSIGN_OR_RETURN(HfModelSpec spec, ParseMistralParams(params, dir));
  MoeLayerConfig got = spec.info.layer;
  if (got.n_groups <= 1 && k.n_groups == 0) {
    got.n_groups = 0;
    got.topk_groups = 0;
    got.group_score = k.group_score;
  }
  if (!(got == k) || spec.family != o.family) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.name, ": a ", HfFamilyName(o.family),
        " params.json does not express its config ", MoeLayerConfigToJson(k),
        " (it reads back as ", MoeLayerConfigToJson(got), ")"));
  }
  if (!spec.info.HasLayer(o.layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", o.layer, " would not be an MoE layer"));
  }
  std::vector<Tensor> tensors;
  tensors.push_back(
      {"tok_embeddings.weight", {kVocab, H}, Filler(o.seed, kVocab * H, 0.5f)});
  for (int64_t l = 0; l < num_layers; ++l) {
    const bool moe = spec.info.HasLayer(l);
    AddMistralUnrelated(o.family, H, l, o.seed + l, !moe, &tensors);
    if (moe) {
      AddMistralMoeLayer(c, o.family, l, l == o.layer, o.seed + 100 * l,
                         &tensors);
    }
  }
  tensors.push_back({"norm.weight", {H}, std::vector<float>(H, 1.0f)});
  tensors.push_back(
      {"output.weight", {kVocab, H}, Filler(o.seed + 5, kVocab * H, 0.5f)});
  if (o.family == HfFamily::kDeepseekV3) {
    tensors.push_back(
        {"vision_encoder.transformer.layers.0.attention.wq.weight",
         {48, 48},
         Filler(o.seed + 6, 48 * 48, 0.1f)});
    tensors.push_back({"vision_language_adapter.w_in.weight",
                       {H, 48},
                       Filler(o.seed + 7, H * 48, 0.1f)});
  }

  fs::create_directories(dir);
  const int shards = std::max(1, o.shards);
  auto shard_name = [&](int s) {
    return shards == 1
               ? std::string("consolidated.safetensors")
               : absl::StrFormat("consolidated-%05d-of-%05d.safetensors", s + 1,
                                 shards);
  };
  MOE_RETURN_IF_ERROR(WriteShards(
      tensors, shards, shard_name,
      [&](const Tensor& t) {
        return absl::EndsWith(t.name, "gate.weight") ? o.router_storage
                                                     : o.storage;
      },
      o.write_index, "consolidated.safetensors.index.json", dir));
  std::ofstream(fs::path(dir) / "params.json") << params;
  return absl::OkStatus();
}

absl::Status SetMistralParamsKey(const std::string& dir, const std::string& key,
                                 const std::string& value_json) {
  const fs::path path = fs::path(dir) / "params.json";
  json j = json::parse(std::ifstream(path), nullptr, false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError("SetMistralParamsKey: bad params.json");
  }
  json* at = &j;
  std::string last = key;
  if (const size_t dot = key.find('.'); dot != std::string::npos) {
    at = &j[key.substr(0, dot)];
    last = key.substr(dot + 1);
  }
  if (value_json.empty()) {
    at->erase(last);
  } else {
    json v = json::parse(value_json, nullptr, false);
    if (v.is_discarded()) {
      return absl::InvalidArgumentError("SetMistralParamsKey: bad JSON");
    }
    (*at)[last] = v;
  }
  return WriteJson(path, j);
}

std::vector<HfFamily> FamiliesFor(const MoeLayerConfig& c) {
  std::vector<HfFamily> out;
  for (HfFamily f : AllHfFamilies()) {
    auto spec = ParseHfConfig(HfConfigJson(c, f, 3), "probe");
    if (!spec.ok()) continue;
    // One group keeping one group is no group limit at all, whichever side
    // says it.
    auto ungrouped = [&c](MoeLayerConfig k) {
      if (k.n_groups == 1 && k.topk_groups == 1) {
        k.n_groups = 0;
        k.topk_groups = 0;
      }
      if (k.n_groups == 0) k.group_score = c.group_score;
      return k;
    };
    if (ungrouped(spec->info.layer) == ungrouped(c)) out.push_back(f);
  }
  return out;
}

absl::Status WriteHfCheckpoint(const GoldenCase& c, const HfWriteOptions& o,
                               const std::string& dir) {
  if (o.layout == HfExpertLayout::kConsolidated) {
    return WriteMistralCheckpoint(c, o, dir);
  }
  const MoeLayerConfig& k = c.config;
  const int64_t H = k.hidden;
  const int64_t num_layers = o.layer + 2;
  fs::create_directories(dir);
  const int64_t E = k.num_experts, I = k.inter;
  if ((k.router_bias &&
       static_cast<int64_t>(c.router_bias.size()) != k.router_rows()) ||
      (k.output_bias && static_cast<int64_t>(c.output_bias.size()) != H) ||
      (k.expert_bias && (static_cast<int64_t>(c.b1.size()) != E * I ||
                         static_cast<int64_t>(c.b3.size()) != E * I ||
                         static_cast<int64_t>(c.b2.size()) != E * H)) ||
      (k.hash_routed() &&
       static_cast<int64_t>(c.tid2eid.size()) != k.hash_vocab * k.top_k)) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.name,
        ": the case lacks the router bias, expert biases or tid2eid "
        "values its config asks for"));
  }
  const GoldenCase* hc = o.hash_case;
  if (hc != nullptr &&
      (o.family != HfFamily::kDeepseekV4 || !hc->config.hash_routed() ||
       k.hash_routed() || o.hash_layers <= 0 || o.layer < o.hash_layers ||
       static_cast<int64_t>(hc->tid2eid.size()) !=
           hc->config.hash_vocab * hc->config.top_k)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hash layers: ", hc->name, " must be a hash case with its tid2eid and ",
        c.name, " a top-k one at layer ", o.layer, " >= hash_layers ",
        o.hash_layers, ", in a deepseek_v4 checkpoint"));
  }
  if (o.released && o.family != HfFamily::kGptOss &&
      o.family != HfFamily::kDeepseekV4 && o.family != HfFamily::kKimiK3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no released quantised form is written for ", HfFamilyName(o.family)));
  }
  if (o.nvfp4_experts &&
      (o.released || o.layout != HfExpertLayout::kPerExpert ||
       HfLocate(o.family, k, o.layer, WeightRole::kW1, 0).fused ||
       HfLocate(o.family, k, o.layer, WeightRole::kW1, 0, o.layout).linear ||
       k.hidden % 16 != 0 || k.inter % 16 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVFP4 experts are written for per-expert families with hidden and "
        "inter multiples of 16, not ",
        HfFamilyName(o.family)));
  }
  std::string config = HfConfigJson(k, o.family, num_layers);
  if (o.nvfp4_experts) {
    json j = json::parse(config);
    j["quantization_config"] = {
        {"quant_method", "modelopt"},
        {"quant_algo", "NVFP4"},
        {"group_size", 16},
        {"ignore",
         {"lm_head", "model.layers.*.mlp.gate",
          "model.layers.*.mlp.shared_expert*", "model.layers.*.self_attn*"}}};
    config = j.dump(2);
  }
  if (hc != nullptr) {
    json j = json::parse(config);
    j["num_hash_layers"] = o.hash_layers;
    j["vocab_size"] = hc->config.hash_vocab;
    config = j.dump(2);
  }
  if (o.released) {
    json j = json::parse(config);
    if (o.family == HfFamily::kKimiK3) {
      // compressed-tensors MXFP4 for the routed experts only.
      j["quantization_config"] = {
          {"quant_method", "compressed-tensors"},
          {"format", "mxfp4-pack-quantized"},
          {"config_groups",
           {{"group_0",
             {{"format", "mxfp4-pack-quantized"},
              {"targets", {"re:.*block_sparse_moe\\.experts\\..*"}},
              {"weights",
               {{"num_bits", 4},
                {"type", "float"},
                {"group_size", 32},
                {"strategy", "group"},
                {"scale_dtype", "torch.uint8"}}}}}}},
          {"ignore",
           {"lm_head", "re:.*shared_experts.*", "re:vision_tower.*"}}};
    } else if (o.family == HfFamily::kGptOss) {
      j["quantization_config"] = {
          {"quant_method", "mxfp4"},
          {"modules_to_not_convert",
           {"model.layers.*.self_attn", "model.layers.*.mlp.router",
            "model.embed_tokens", "lm_head"}}};
    } else {
      j["expert_dtype"] = "fp4";
      j["quantization_config"] = {{"quant_method", "fp8"},
                                  {"fmt", "e4m3"},
                                  {"scale_fmt", "ue8m0"},
                                  {"activation_scheme", "dynamic"},
                                  {"weight_block_size", {128, 128}}};
    }
    config = j.dump(2);
  }
  MOE_ASSIGN_OR_RETURN(HfModelSpec spec, ParseHfConfig(config, dir));
  if (!spec.info.HasLayer(o.layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", o.layer, " would not be an MoE layer"));
  }
  if (hc != nullptr &&
      (!(spec.info.LayerConfig(o.hash_layers - 1) == hc->config) ||
       !(spec.info.LayerConfig(o.layer) == k))) {
    return absl::InvalidArgumentError(
        "hash layers: the config written does not parse back to the cases'");
  }

  // Qwen3.5 is always written packed, as transformers v5 saves it.
  const HfExpertLayout layout =
      o.family == HfFamily::kQwen35Moe ? HfExpertLayout::kPacked : o.layout;
  // The language model's own prefix in a multimodal checkpoint.
  const HfFamily f = o.family;
  const bool lm_first = f == HfFamily::kLlama4 || f == HfFamily::kKimiK3 ||
                        f == HfFamily::kAria || f == HfFamily::kKimiVl ||
                        f == HfFamily::kKimiK25 ||
                        f == HfFamily::kMinimaxVl01 ||
                        f == HfFamily::kInternVlChat;
  const std::string lm =
      lm_first ? "language_model.model."
      : f == HfFamily::kQwen35Moe || f == HfFamily::kGemma4 ||
              f == HfFamily::kQwen3VlMoe || f == HfFamily::kGlm4vMoe ||
              f == HfFamily::kInternS1 || f == HfFamily::kInternVl ||
              f == HfFamily::kLfm2Vl
          ? "model.language_model."
      : f == HfFamily::kNemotronH    ? "backbone."
      : f == HfFamily::kDbrx         ? "transformer."
      : f == HfFamily::kQwen3OmniMoe ? "thinker.model."
      : f == HfFamily::kOvis26Moe    ? "llm.model."
                                     : "model.";
  std::vector<Tensor> tensors;
  tensors.push_back({lm + (f == HfFamily::kNemotronH ? "embeddings.weight"
                           : f == HfFamily::kDbrx    ? "wte.weight"
                                                     : "embed_tokens.weight"),
                     {kVocab, H},
                     Filler(o.seed, kVocab * H, 0.5f)});
  for (int64_t l = 0; l < num_layers; ++l) {
    AddUnrelated(o.family, H, l, o.seed, &tensors);
    if (spec.info.HasLayer(l) &&
        (f == HfFamily::kStep3p5 || f == HfFamily::kStep3Text ||
         f == HfFamily::kStep3Vl)) {
      AddStepLayer(c, l, l == o.layer, f == HfFamily::kStep3p5,
                   o.seed + 100 * l, &tensors);
    } else if (spec.info.HasLayer(l)) {
      const bool hashed = hc != nullptr && l < o.hash_layers;
      const int64_t golden = hashed ? o.hash_layers - 1 : o.layer;
      const GoldenCase& lc = hashed ? *hc : c;
      const bool exact = AddMoeLayer(
          lc, o.family, l, l == golden, o.seed + 100 * l, &tensors, o.released,
          layout, o.nvfp4_experts, l == golden ? o.vision_case : nullptr);
      if (l == golden && !exact) {
        return absl::InvalidArgumentError(absl::StrCat(
            lc.name, ": its weights are not exactly representable in the ",
            HfFamilyName(o.family),
            o.nvfp4_experts ? " NVFP4 form"
                            : " release's MXFP4 / FP8 formats"));
      }
    } else if (f != HfFamily::kNemotronH) {  // Nemotron's are its mixers
      AddDenseMlp(o.family, H, l, o.seed + l, &tensors);
    }
  }
  HfWriteOptions mtp_options = o;
  mtp_options.layout = layout;
  AddMtp(c, mtp_options, num_layers, &tensors);
  tensors.push_back(
      {lm + (f == HfFamily::kNemotronH || f == HfFamily::kDbrx ? "norm_f.weight"
                                                               : "norm.weight"),
       {H},
       std::vector<float>(H, 1.0f)});
  tensors.push_back({(lm_first                       ? "language_model."
                      : f == HfFamily::kQwen3OmniMoe ? "thinker."
                                                     : "") +
                         std::string("lm_head.weight"),
                     {kVocab, H},
                     Filler(o.seed + 5, kVocab * H, 0.5f)});
  if (o.family == HfFamily::kLlama4) {
    // The vision tower and projector of the multimodal checkpoint.
    tensors.push_back({"vision_model.patch_embedding.linear.weight",
                       {H, 48},
                       Filler(o.seed + 6, H * 48, 0.1f)});
    tensors.push_back({"multi_modal_projector.linear_1.weight",
                       {H, H},
                       Filler(o.seed + 7, H * H, 0.1f)});
  }
  if (f == HfFamily::kStep3Vl || f == HfFamily::kMinimaxVl01 ||
      f == HfFamily::kInternS1 || f == HfFamily::kInternVl ||
      f == HfFamily::kInternVlChat || f == HfFamily::kOvis26Moe ||
      f == HfFamily::kLfm2Vl) {
    // The wrappers' vision towers and projectors, named as each release
    // names them, which the loader must skip.
    const std::string v =
        f == HfFamily::kStep3Vl || f == HfFamily::kInternVlChat
            ? "vision_model."
        : f == HfFamily::kMinimaxVl01 ? "vision_tower."
        : f == HfFamily::kOvis26Moe   ? "visual_tokenizer.vit."
                                      : "model.vision_tower.";
    tensors.push_back({v + "encoder.layers.0.mlp.fc1.weight",
                       {H, 48},
                       Filler(o.seed + 6, H * 48, 0.1f)});
    tensors.push_back({f == HfFamily::kInternVlChat ? "mlp1.1.weight"
                       : f == HfFamily::kStep3Vl ? "vit_large_projector.weight"
                       : f == HfFamily::kOvis26Moe ? "vte.weight"
                       : f == HfFamily::kMinimaxVl01
                           ? "multi_modal_projector.linear_1.weight"
                           : "model.multi_modal_projector.linear_1.weight",
                       {H, H},
                       Filler(o.seed + 7, H * H, 0.1f)});
  }
  if (f == HfFamily::kKimiK3 || f == HfFamily::kGemma4) {
    // The vision tower and its projector, which the loader must skip.
    const std::string v =
        f == HfFamily::kKimiK3 ? "vision_tower." : "model.vision_tower.";
    tensors.push_back({v + "encoder.blocks.0.wqkv.weight",
                       {3 * H, 48},
                       Filler(o.seed + 6, 3 * H * 48, 0.1f)});
    tensors.push_back({f == HfFamily::kKimiK3
                           ? "mm_projector.proj.0.weight"
                           : "model.embed_vision.embedding_projection.weight",
                       {H, 48},
                       Filler(o.seed + 7, H * 48, 0.1f)});
  }
  if (f == HfFamily::kQwen3OmniMoe) {
    // The audio tower and the talker's own MoE layer (a router and an
    // expert of the same names under talker.), which the loader must skip.
    tensors.push_back({"thinker.audio_tower.layers.0.fc1.weight",
                       {H, 48},
                       Filler(o.seed + 6, H * 48, 0.1f)});
    tensors.push_back({"talker.model.layers.0.mlp.gate.weight",
                       {4, 32},
                       Filler(o.seed + 8, 4 * 32, 0.1f)});
    tensors.push_back({"talker.model.layers.0.mlp.experts.0.gate_proj.weight",
                       {8, 32},
                       Filler(o.seed + 9, 8 * 32, 0.1f)});
  }
  if (f == HfFamily::kAria) {
    // Aria's vision tower and projector, which the loader must skip.
    tensors.push_back({"vision_tower.encoder.layers.0.mlp.fc1.weight",
                       {H, 48},
                       Filler(o.seed + 6, H * 48, 0.1f)});
    tensors.push_back({"multi_modal_projector.feed_forward.linear_in.weight",
                       {H, H},
                       Filler(o.seed + 7, H * H, 0.1f)});
  }
  if (o.family == HfFamily::kQwen35Moe || o.family == HfFamily::kQwen3VlMoe) {
    // The vision tower, which the loader must skip.
    tensors.push_back({"model.visual.patch_embed.proj.weight",
                       {H, 48},
                       Filler(o.seed + 6, H * 48, 0.1f)});
    tensors.push_back({"model.visual.merger.linear_fc2.weight",
                       {H, H},
                       Filler(o.seed + 7, H * H, 0.1f)});
  }
  if (f == HfFamily::kKimiVl || f == HfFamily::kKimiK25 ||
      f == HfFamily::kGlm4vMoe) {
    // Kimi-VL's and K2.5's MoonViT and projector, GLM-4.5V's visual
    // tower and merger: all skipped by the loader.
    const bool glm = f == HfFamily::kGlm4vMoe;
    tensors.push_back({glm ? "model.visual.blocks.0.attn.qkv.weight"
                           : "vision_tower.encoder.blocks.0.wqkv.weight",
                       {3 * H, 48},
                       Filler(o.seed + 6, 3 * H * 48, 0.1f)});
    tensors.push_back({glm ? "model.visual.merger.proj.weight"
                           : "multi_modal_projector.linear_1.weight",
                       {H, 48},
                       Filler(o.seed + 7, H * 48, 0.1f)});
  }

  const int shards = std::max(1, o.shards);
  auto shard_name = [&](int s) {
    return shards == 1 && !o.write_index
               ? std::string("model.safetensors")
               : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                 shards);
  };
  auto dtype_of = [&](const Tensor& t) {
    const bool router = absl::EndsWith(t.name, "mlp.gate.weight") ||
                        absl::EndsWith(t.name, "mlp.gate.weight_1") ||
                        absl::EndsWith(t.name, "feed_forward.gate.weight") ||
                        absl::EndsWith(t.name, "router.gate.weight") ||
                        absl::EndsWith(t.name, "expert_bias") ||
                        absl::EndsWith(t.name, "moe.gate.weight") ||
                        absl::EndsWith(t.name, "mixer.gate.weight") ||
                        absl::EndsWith(t.name, "router.proj.weight") ||
                        absl::EndsWith(t.name, "router.scale") ||
                        absl::EndsWith(t.name, "router.weight") ||
                        absl::EndsWith(t.name, "e_score_correction_bias") ||
                        absl::EndsWith(t.name, "gate.bias") ||
                        absl::EndsWith(t.name, "router.bias") ||
                        absl::EndsWith(t.name, "moe.router_bias") ||
                        absl::EndsWith(t.name, "router.classifier.weight") ||
                        absl::EndsWith(t.name, "router.classifier.bias") ||
                        absl::EndsWith(t.name, "router.layer.weight") ||
                        absl::EndsWith(t.name, "moe_block.gate.weight");
    return t.fixed || t.dtype == DType::kI32 ? t.dtype
           : router                          ? o.router_storage
                                             : o.storage;
  };
  MOE_RETURN_IF_ERROR(WriteShards(tensors, shards, shard_name, dtype_of,
                                  o.write_index, "model.safetensors.index.json",
                                  dir));
  std::ofstream(fs::path(dir) / "config.json") << config;
  return absl::OkStatus();
}

absl::StatusOr<DeepseekV4Mixed> WriteDeepseekV4Mixed(const std::string& dir,
                                                     bool released) {
  DeepseekV4Mixed m;
  MOE_ASSIGN_OR_RETURN(
      m.hash, LoadGoldenCase(GoldenDir() + "/deepseek_v4_hash.safetensors"));
  MOE_ASSIGN_OR_RETURN(
      m.topk, LoadGoldenCase(GoldenDir() + "/deepseek_v4_like.safetensors"));
  HfWriteOptions o;
  o.family = HfFamily::kDeepseekV4;
  o.layer = 2;
  o.hash_case = &m.hash;
  o.hash_layers = 2;
  o.released = released;
  MOE_RETURN_IF_ERROR(WriteHfCheckpoint(m.topk, o, dir));
  return m;
}

absl::Status ReplaceHfTensor(const std::string& dir, const std::string& name,
                             const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return ReplaceHfTensorBytes(dir, name, DType::kF32, shape,
                              std::vector<uint8_t>(shape.empty() ? 0 : n * 4));
}

absl::Status ReplaceHfTensorBytes(const std::string& dir,
                                  const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape,
                                  const std::vector<uint8_t>& bytes) {
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    index_path = fs::path(dir) / "consolidated.safetensors.index.json";
  }
  json index = json::parse(std::ifstream(index_path), nullptr, false);
  if (index.is_discarded() || !index["weight_map"].contains(name)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no indexed tensor ", name));
  }
  const std::string shard = index["weight_map"][name];
  const std::string path = (fs::path(dir) / shard).string();
  SafetensorsWriter out;
  {
    MOE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(path));
    for (const auto& t : f->header().tensors) {
      if (t.name == name) continue;
      MOE_ASSIGN_OR_RETURN(TensorRef ref, f->Get(t.name));
      out.Add(t.name, t.dtype, t.shape, ref.data, ref.nbytes());
    }
  }
  if (shape.empty()) {
    index["weight_map"].erase(name);
    MOE_RETURN_IF_ERROR(WriteJson(index_path, index));
  } else {
    out.Add(name, dtype, shape, bytes.data(), bytes.size());
  }
  return out.WriteFile(path);
}

absl::Status SetHfConfigKey(const std::string& dir, const std::string& key,
                            const std::string& value_json) {
  const fs::path path = fs::path(dir) / "config.json";
  json j = json::parse(std::ifstream(path), nullptr, false);
  json v = json::parse(value_json, nullptr, false);
  if (j.is_discarded() || v.is_discarded()) {
    return absl::InvalidArgumentError("SetHfConfigKey: bad JSON");
  }
  j[key] = v;
  return WriteJson(path, j);
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path root = base != nullptr ? fs::path(base) : fs::temp_directory_path();
  std::string templ = (root / (prefix + "XXXXXX")).string();
  char* made = ::mkdtemp(templ.data());
  return made != nullptr ? std::string(made) : std::string();
}

absl::StatusOr<std::string> WriteCaseCheckpoint(const GoldenCase& c,
                                                const std::string& prefix,
                                                HfWriteOptions o) {
  const std::vector<HfFamily> families = FamiliesFor(c.config);
  if (families.empty()) {
    return absl::InvalidArgumentError(
        "no checkpoint family expresses golden case " + c.name);
  }
  const std::string dir = MakeTempDir(prefix);
  if (dir.empty()) {
    return absl::InternalError("cannot make a temp dir for " + prefix);
  }
  // The last family that takes rows without token types: a case's
  // checkpoint is served to callers that send none (ERNIE-4.5-VL's layers
  // need them).
  o.family = families.back();
  for (auto f = families.rbegin(); f != families.rend(); ++f) {
    if (*f != HfFamily::kErnie45VlMoe) {
      o.family = *f;
      break;
    }
  }
  if (absl::Status s = WriteHfCheckpoint(c, o, dir); !s.ok()) return s;
  return dir;
}

}  // namespace moe::testing
