// ForwardRequest.token_ids checks (hash-routed layers): missing, wrong
// length and out-of-range ids are INVALID_ARGUMENT naming the field and the
// row; other layers accept and ignore well-formed ids. The caller-routing
// fields (routing, router_logits, shared) likewise.
#include "server/api/request_validator.h"

#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

ModelInfo Model(int64_t hash_vocab) {
  ModelInfo m;
  m.moe_layers = {0};
  m.layer.hidden = 4;
  m.layer.inter = 4;
  m.layer.num_experts = 4;
  m.layer.top_k = 2;
  m.layer.hash_vocab = hash_vocab;
  return m;
}

moe::v1::ForwardRequest Request(int64_t rows, std::vector<int64_t> ids) {
  moe::v1::ForwardRequest r;
  std::vector<float> x(rows * 4, 0.5f);
  EncodeMatrix(x.data(), rows, 4, moe::v1::F32, r.mutable_hidden_states());
  for (int64_t id : ids) r.add_token_ids(id);
  return r;
}

void ExpectBad(const moe::v1::ForwardRequest& r, const ModelInfo& m,
               const std::string& want) {
  auto v = ValidateForward(r, m, ForwardLimits{1024});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find(want), absl::string_view::npos)
      << v.status();
}

TEST(RequestValidator, HashLayerNeedsOneIdInTheVocabularyPerRow) {
  const ModelInfo m = Model(10);
  ExpectBad(Request(3, {}), m, "token_ids: required");
  ExpectBad(Request(3, {1, 2}), m, "token_ids: 2 ids for 3 rows");
  ExpectBad(Request(3, {1, 10, 2}), m, "token_ids[1] (row 1)");
  ExpectBad(Request(3, {1, 2, -1}), m, "token_ids[2] (row 2)");
  // token_ids views the request, which must outlive it.
  const moe::v1::ForwardRequest ok = Request(3, {0, 9, 4});
  auto v = ValidateForward(ok, m, ForwardLimits{1024});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::vector<int64_t>(v->token_ids.begin(), v->token_ids.end()),
            (std::vector<int64_t>{0, 9, 4}));
  // N = 0: no rows, no ids needed.
  EXPECT_TRUE(ValidateForward(Request(0, {}), m, ForwardLimits{1024}).ok());
}

TEST(RequestValidator, OtherLayersIgnoreIdsButCountThem) {
  const ModelInfo m = Model(0);
  EXPECT_TRUE(ValidateForward(Request(2, {}), m, ForwardLimits{1024}).ok());
  EXPECT_TRUE(
      ValidateForward(Request(2, {77, -5}), m, ForwardLimits{1024}).ok());
  ExpectBad(Request(2, {1}), m, "expected one per row");
}

// ERNIE-4.5-VL: MoE layer 0 has vision experts, run as layer 5. Its
// requests need one type per row (0 text, 1 image, 2 video); a request with
// a row that is not text is split (vision_layer set), an all-text one is
// not; the vision layer is never a request's layer, and caller routing is
// taken for all-text requests only.
TEST(RequestValidator, ModalityLayerNeedsATypePerRow) {
  ModelInfo m = Model(0);
  m.num_layers = 5;
  m.moe_layers = {0, 5};
  m.vision_layers[0] = 5;
  m.family = "ernie4_5_moe_vl";
  auto typed = [](std::vector<int32_t> types) {
    moe::v1::ForwardRequest r = Request(static_cast<int64_t>(types.size()), {});
    for (int32_t t : types) r.add_token_types(t);
    return r;
  };
  ExpectBad(Request(3, {}), m, "token_types: required: layer 0");
  moe::v1::ForwardRequest short_types = Request(3, {});
  short_types.add_token_types(0);
  ExpectBad(short_types, m, "token_types: 1 types for 3 rows");
  ExpectBad(typed({0, 3, 1}), m, "token_types[1] (row 1): 3 is not");
  ExpectBad(typed({0, -1}), m, "token_types[1]");
  auto mixed = ValidateForward(typed({0, 2, 1}), m, ForwardLimits{1024});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->vision_layer, 5);
  EXPECT_EQ(mixed->token_types.size(), 3u);
  auto text = ValidateForward(typed({0, 0}), m, ForwardLimits{1024});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->vision_layer, -1);
  moe::v1::ForwardRequest to_vision = typed({1, 1});
  to_vision.set_layer(5);
  ExpectBad(to_vision, m, "layer: 5 is layer 0's vision experts");
  moe::v1::ForwardRequest replay = typed({0, 1});
  replay.mutable_routing()->set_tokens(2);
  replay.mutable_routing()->set_slots(2);
  for (int i = 0; i < 4; ++i) {
    replay.mutable_routing()->add_expert_ids(i % 2);
    replay.mutable_routing()->add_weights(0.5f);
  }
  ExpectBad(replay, m, "routing: taken only when every row is text");
  // Other layers ignore well-formed types, and count them.
  const ModelInfo plain = Model(0);
  EXPECT_TRUE(ValidateForward(typed({1, 0}), plain, ForwardLimits{1024}).ok());
  short_types = Request(2, {});
  short_types.add_token_types(1);
  ExpectBad(short_types, plain, "token_types: 1 types for 2 rows");
}

// DeepSeek-V4: hash-routed first layers, top-k after them. Each layer is
// checked by its own config.
TEST(RequestValidator, EachLayerByItsOwnRouting) {
  ModelInfo m = Model(0);
  m.moe_layers = {0, 1};
  MoeLayerConfig hashed = m.layer;
  hashed.hash_vocab = 10;
  m.layer_overrides[0] = hashed;
  moe::v1::ForwardRequest to0 = Request(2, {});
  to0.set_layer(0);
  ExpectBad(to0, m, "token_ids: required: layer 0 is hash-routed");
  to0 = Request(2, {3, 10});
  to0.set_layer(0);
  ExpectBad(to0, m, "token_ids[1] (row 1): 10 is outside layer 0's");
  to0 = Request(2, {3, 9});
  to0.set_layer(0);
  EXPECT_TRUE(ValidateForward(to0, m, ForwardLimits{1024}).ok());
  // The top-k layer: ids optional, any values.
  moe::v1::ForwardRequest to1 = Request(2, {});
  to1.set_layer(1);
  EXPECT_TRUE(ValidateForward(to1, m, ForwardLimits{1024}).ok());
  to1 = Request(2, {3, 10});
  to1.set_layer(1);
  EXPECT_TRUE(ValidateForward(to1, m, ForwardLimits{1024}).ok());
}

// The caller-routing fields (CheckCallerRouting): the routing's tokens and
// k against the rows and the layer, and what is viewed when valid.
TEST(RequestValidator, CallerRoutingIsCheckedAgainstTheRowsAndTheLayer) {
  const ModelInfo m = Model(0);
  auto routed = [](int64_t tokens, int32_t slots, std::vector<int32_t> ids,
                   std::vector<float> w) {
    moe::v1::ForwardRequest r = Request(2, {});
    r.mutable_routing()->set_tokens(tokens);
    r.mutable_routing()->set_slots(slots);
    for (int32_t id : ids) r.mutable_routing()->add_expert_ids(id);
    for (float v : w) r.mutable_routing()->add_weights(v);
    return r;
  };
  ExpectBad(routed(3, 2, {0, 1, 2, 3}, {1, 1, 1, 1}), m,
            "routing.tokens: 3 for 2 rows");
  ExpectBad(routed(2, 3, {0, 1, 2, 3}, {1, 1, 1, 1}), m,
            "routing.slots: wrong k: 3, expected layer 0's top_k of 2");
  ExpectBad(routed(2, 2, {0, 1, 2}, {1, 1, 1, 1}), m,
            "routing.expert_ids: 3 ids, expected 4");
  ExpectBad(routed(2, 2, {0, 1, 2, -1}, {1, 1, 1, 1}), m,
            "routing.expert_ids[3] (row 1, slot 1): -1 is outside [0, 4)");
  moe::v1::ForwardRequest mode = Request(2, {});
  mode.set_shared(static_cast<moe::v1::SharedMode>(3));
  ExpectBad(mode, m, "shared: unknown SharedMode 3");
  const moe::v1::ForwardRequest ok =
      routed(2, 2, {3, 1, 0, 2}, {0.5f, 0.25f, 1, 0});
  auto v = ValidateForward(ok, m, ForwardLimits{1024});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->caller.source, RouteSource::kRouting);
  EXPECT_EQ(std::vector<int32_t>(v->caller.expert_ids.begin(),
                                 v->caller.expert_ids.end()),
            (std::vector<int32_t>{3, 1, 0, 2}));
  moe::v1::ForwardRequest logits = Request(2, {});
  std::vector<float> l(2 * 4, 0.5f);
  EncodeMatrix(l.data(), 2, 4, moe::v1::BF16, logits.mutable_router_logits());
  logits.set_shared(moe::v1::SHARED_SKIP);
  v = ValidateForward(logits, m, ForwardLimits{1024});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->caller.source, RouteSource::kLogits);
  EXPECT_EQ(v->caller.logits.dtype, DType::kBF16);
  EXPECT_EQ(v->caller.shared, SharedPart::kSkip);
  EncodeMatrix(l.data(), 1, 8, moe::v1::F32, logits.mutable_router_logits());
  ExpectBad(logits, m, "router_logits.shape[1]: wrong width 8");
  EncodeMatrix(l.data(), 4, 2, moe::v1::F32, logits.mutable_router_logits());
  ExpectBad(logits, m, "router_logits.shape[1]: wrong width 2");
  EncodeMatrix(l.data(), 1, 4, moe::v1::F32, logits.mutable_router_logits());
  ExpectBad(logits, m, "router_logits.shape[0]: 1 rows for 2 rows");
}

}  // namespace
}  // namespace moe
