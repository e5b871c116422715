// Graph capture: fine-grained nodes, lifted parameter names, protobuf round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "core/Error.h"
#include "core/Capture.h"
#include "core/OpGraph.h"
#include "core/StageModule.h"
#include "tests/TestUtil.h"

namespace sluice {
namespace {

TEST(Capture, GptHasAtenLevelNodes) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8);
  // A 2-layer GPT is ~20 aten ops per block plus embeddings and head: on the
  // order of a hundred nodes, not a handful of module calls.
  EXPECT_GE(g.numNodes(), 50) << g.toString();
  EXPECT_LE(g.numNodes(), 400);
  std::multiset<std::string> ops;
  for (auto& n : g.nodes()) ops.insert(n.op);
  EXPECT_EQ(ops.count("aten::layer_norm"), 5u);  // 2 per block + final
  EXPECT_EQ(ops.count("aten::scaled_dot_product_attention"), 2u);  // Note [attention fusion]
  EXPECT_EQ(ops.count("aten::embedding"), 2u);
  // LibTorch's C++ Linear on 3-D input is traced as t + matmul + add_: 4 per
  // block, plus the LM head.
  EXPECT_EQ(ops.count("aten::matmul") + ops.count("aten::linear"), 9u) << g.toString();
}

TEST(Capture, ParametersAndBuffersAreNamedInputs) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8);
  std::set<std::string> params, buffers, data;
  for (auto& in : g.inputs()) {
    (in.kind == InputKind::Parameter ? params : in.kind == InputKind::Buffer ? buffers : data).insert(in.name);
  }
  EXPECT_EQ(data, std::set<std::string>{"tokens"});
  EXPECT_EQ(params.size(), gpt->parameters().size());
  for (auto& p : gpt->named_parameters()) EXPECT_TRUE(params.count(p.key())) << p.key();
  EXPECT_TRUE(params.count("h.1.attn.c_proj.weight"));
  EXPECT_TRUE(params.count("h.0.mlp.c_fc.bias"));
  EXPECT_TRUE(buffers.count("h.0.attn.mask"));
  // Every parameter is read by some node: no weight was baked into a constant.
  std::set<std::string> read;
  for (auto& n : g.nodes()) read.insert(n.params.begin(), n.params.end());
  for (auto& p : params) EXPECT_TRUE(read.count(p)) << p << " is not read by any node";
}

TEST(Capture, CompiledGraphMatchesModule) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8);
  auto tokens = torch::randint(0, 64, {2, 8}, torch::kLong);
  auto inputs = graphInputs(g, *gpt, {tokens});
  StageModule whole(g.graph(), "whole");
  for (int i = 0; i < 3; ++i) {  // the first calls profile, later ones run the optimized graph
    auto out = whole.forward(inputs);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(torch::allclose(out[0], gpt->forward(tokens), 1e-5, 1e-6));
  }
  EXPECT_EQ(whole.metrics().compiles, 1);
  EXPECT_EQ(whole.metrics().cacheHits, 2);
}

TEST(Capture, ProtobufRoundTrip) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(2));
  auto g = test::captureGpt(gpt, 2, 8);
  std::string path = testing::TempDir() + "/graph_roundtrip.pb";
  g.save(path);
  auto back = OpGraph::load(path);
  EXPECT_EQ(back.hash(), g.hash());
  ASSERT_EQ(back.numNodes(), g.numNodes());
  for (int i = 0; i < g.numNodes(); ++i) EXPECT_EQ(back.nodes()[i].op, g.nodes()[i].op);
  ASSERT_EQ(back.inputs().size(), g.inputs().size());
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    EXPECT_EQ(back.inputs()[i].name, g.inputs()[i].name);
    EXPECT_EQ(back.inputs()[i].kind, g.inputs()[i].kind);
    EXPECT_EQ(back.inputs()[i].value.shape, g.inputs()[i].value.shape);
  }
  EXPECT_EQ(back.toString(), g.toString());
  std::remove(path.c_str());
}

TEST(Capture, TruncatedProtobufIsRejected) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(1));
  auto bytes = test::captureGpt(gpt, 1, 4).toProtoBytes();
  EXPECT_THROW(OpGraph::fromProtoBytes(bytes.substr(0, bytes.size() / 2)), GraphError);
}

TEST(Capture, DifferentShapesHashDifferently) {
  torch::manual_seed(0);
  models::Gpt gpt(test::tinyGpt(1));
  EXPECT_NE(test::captureGpt(gpt, 2, 8).hash(), test::captureGpt(gpt, 2, 4).hash());
  EXPECT_EQ(test::captureGpt(gpt, 2, 8).hash(), test::captureGpt(gpt, 2, 8).hash());
}

}  // namespace
}  // namespace sluice
