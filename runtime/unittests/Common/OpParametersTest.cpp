//===- OpParametersTest.cpp - Rows decode their attributes once -----------===//
//
// Every row decodes into its family's struct; each attribute a kernel
// reads lands in its field, and an attribute an instance leaves out reads
// as the row's default (causal attention, no padding row, a router's
// scaling of one, no schedule).
//
//===----------------------------------------------------------------------===//

#include "trellis/Common/OpContract.h"

#include <gtest/gtest.h>

#include <map>

using namespace trellis;

namespace {

AttrValue integer(int64_t value) { return AttrValue::ofInt(value); }
AttrValue real(double value) { return AttrValue::ofReal(value); }
AttrValue flag(bool value) { return AttrValue::ofBool(value); }
AttrValue text(const std::string &value) { return AttrValue::ofString(value); }
AttrValue ints(std::vector<int64_t> values) {
  return AttrValue::ofInts(std::move(values));
}

template <typename P> P decode(const std::string &op, const AttrMap &attrs) {
  const OpContract *row = findOpContract(op);
  EXPECT_NE(row, nullptr) << op;
  if (!row)
    return P();
  OpParameters parameters = decodeParameters(*row, attrs);
  const P *typed = std::get_if<P>(&parameters);
  EXPECT_NE(typed, nullptr) << op << " decodes into another struct";
  return typed ? *typed : P();
}

/// The struct each family decodes into, as the variant's index.
size_t expectedAlternative(OpFamily family) {
  switch (family) {
  case OpFamily::Fill:
    return OpParameters(FillParameters()).index();
  case OpFamily::UnaryGrad:
    return OpParameters(UnaryGradParameters()).index();
  case OpFamily::Scale:
    return OpParameters(ScaleParameters()).index();
  case OpFamily::Accumulate:
    return OpParameters(AccumulateParameters()).index();
  case OpFamily::FusedElementwise:
    return OpParameters(FusedElementwiseParameters()).index();
  case OpFamily::Reduction:
    return OpParameters(ReductionParameters()).index();
  case OpFamily::Layout:
    return OpParameters(LayoutParameters()).index();
  case OpFamily::Matmul:
    return OpParameters(MatmulParameters()).index();
  case OpFamily::Norm:
    return OpParameters(NormParameters()).index();
  case OpFamily::Embedding:
    return OpParameters(EmbeddingParameters()).index();
  case OpFamily::Position:
    return OpParameters(PositionParameters()).index();
  case OpFamily::Loss:
    return OpParameters(LossParameters()).index();
  case OpFamily::Attention:
    return OpParameters(AttentionParameters()).index();
  case OpFamily::Expert:
    return OpParameters(ExpertParameters()).index();
  case OpFamily::Optimizer:
    return OpParameters(OptimizerParameters()).index();
  case OpFamily::Collective:
  case OpFamily::PointToPoint:
    return OpParameters(CollectiveParameters()).index();
  case OpFamily::Binary:
  case OpFamily::Unary:
  case OpFamily::Cast:
  case OpFamily::Rowwise:
    return OpParameters(std::monostate()).index();
  }
  return 0;
}

// Tests that every row of a family decodes into that family's struct, and
// that rows without attributes a kernel reads decode into none.
TEST(OpParametersTest, EveryRowDecodesIntoItsFamilysStruct) {
  for (const OpContract &row : opContracts()) {
    OpParameters parameters = decodeParameters(row, AttrMap());
    EXPECT_EQ(parameters.index(), expectedAlternative(row.family))
        << row.name << " (" << opFamilyName(row.family) << ")";
  }
}

// Tests the defaults of attributes an instance leaves out.
TEST(OpParametersTest, AbsentAttributesReadAsTheRowsDefaults) {
  AttentionParameters attention =
      decode<AttentionParameters>("attention", {{"scale", real(0.125)}});
  EXPECT_TRUE(attention.causal);
  EXPECT_EQ(attention.window, 0);
  EXPECT_EQ(attention.softcap, 0);
  EXPECT_EQ(attention.scale, 0.125);
  EXPECT_EQ(decode<EmbeddingParameters>("embedding", {}).paddingIndex, -1);
  EXPECT_EQ(decode<EmbeddingParameters>("embedding_grad",
                                        {{"num_embeddings", integer(8)}})
                .paddingIndex,
            -1);
  ExpertParameters route =
      decode<ExpertParameters>("moe_route", {{"top_k", integer(2)}});
  EXPECT_EQ(route.routing.topK, 2);
  EXPECT_EQ(route.routing.scaling, 1.0);
  EXPECT_FALSE(route.routing.sigmoid);
  EXPECT_FALSE(decode<ExpertParameters>("expert_matmul", {}).allToAll);
  EXPECT_FALSE(
      decode<OptimizerParameters>("adamw", {{"learning_rate", real(1e-3)}})
          .schedule.has_value());
  EXPECT_FALSE(decode<MatmulParameters>("matmul_accumulate", {}).first);
  EXPECT_EQ(decode<CollectiveParameters>("all_reduce", {}).kind,
            ReduceKind::Sum);
}

// Tests that each attribute a kernel reads lands in its field.
TEST(OpParametersTest, AttributesLandInTheirFields) {
  AttentionParameters block = decode<AttentionParameters>(
      "attention_block_grad", {{"scale", integer(2)},
                               {"causal", flag(false)},
                               {"shift", integer(3)},
                               {"chunks", integer(4)},
                               {"softcap", real(50)}});
  EXPECT_EQ(block.scale, 2.0); // an integer is a real
  EXPECT_FALSE(block.causal);
  EXPECT_EQ(block.shift, 3);
  EXPECT_EQ(block.chunks, 4);
  EXPECT_EQ(block.softcap, 50.0);
  EXPECT_EQ(decode<AttentionParameters>(
                "attention", {{"scale", real(1)}, {"window", integer(16)}})
                .window,
            16);

  ExpertParameters route =
      decode<ExpertParameters>("moe_route", {{"top_k", integer(8)},
                                             {"scoring", text("sigmoid")},
                                             {"normalize", flag(true)},
                                             {"scaling", real(2.5)},
                                             {"groups", integer(8)},
                                             {"top_groups", integer(4)}});
  EXPECT_EQ(route.routing.topK, 8);
  EXPECT_TRUE(route.routing.sigmoid);
  EXPECT_TRUE(route.routing.normalize);
  EXPECT_EQ(route.routing.scaling, 2.5);
  EXPECT_EQ(route.routing.groups, 8);
  EXPECT_EQ(route.routing.topGroups, 4);
  ExpertParameters product = decode<ExpertParameters>(
      "expert_matmul_weight_grad", {{"num_experts", integer(4)},
                                    {"transpose_rhs", flag(true)},
                                    {"dispatch", text("all_to_all")}});
  EXPECT_TRUE(product.transposeRhs);
  EXPECT_TRUE(product.allToAll);
  EXPECT_EQ(
      decode<ExpertParameters>("expert_bias_update", {{"rate", real(1e-3)}})
          .rate,
      1e-3);

  OptimizerParameters adamw =
      decode<OptimizerParameters>("adamw", {{"learning_rate", real(3e-4)},
                                            {"beta1", real(0.9)},
                                            {"beta2", real(0.95)},
                                            {"epsilon", real(1e-8)},
                                            {"weight_decay", real(0.1)},
                                            {"lr_schedule", text("cosine")},
                                            {"warmup_steps", integer(10)},
                                            {"decay_steps", integer(100)},
                                            {"min_lr", real(3e-5)}});
  EXPECT_EQ(adamw.learningRate, 3e-4);
  EXPECT_EQ(adamw.beta1, 0.9);
  EXPECT_EQ(adamw.beta2, 0.95);
  EXPECT_EQ(adamw.epsilon, 1e-8);
  EXPECT_EQ(adamw.weightDecay, 0.1);
  ASSERT_TRUE(adamw.schedule.has_value());
  EXPECT_EQ(adamw.schedule->kind, LrScheduleKind::Cosine);
  EXPECT_EQ(adamw.schedule->peak, 3e-4);
  EXPECT_EQ(adamw.schedule->warmupSteps, 10);
  EXPECT_EQ(adamw.schedule->decaySteps, 100);
  EXPECT_EQ(adamw.schedule->minimum, 3e-5);

  MatmulParameters matmul = decode<MatmulParameters>(
      "matmul", {{"transpose_lhs", flag(true)}, {"f32_result", flag(true)}});
  EXPECT_TRUE(matmul.transposeLhs);
  EXPECT_FALSE(matmul.transposeRhs);
  EXPECT_TRUE(matmul.f32Result);
  EXPECT_TRUE(
      decode<MatmulParameters>("matmul_accumulate", {{"first", flag(true)}})
          .first);
  EXPECT_TRUE(
      decode<AccumulateParameters>("accumulate", {{"first", flag(true)}})
          .first);

  EXPECT_EQ(decode<UnaryGradParameters>("unary_grad",
                                        {{"function", text("gelu_tanh")}})
                .function,
            UnaryFunction::GeluTanh);
  EXPECT_EQ(decode<ScaleParameters>("scale", {{"factor", real(-0.5)}}).factor,
            -0.5);
  EXPECT_EQ(decode<FillParameters>("fill", {{"value", integer(3)}}).value, 3.0);
  EXPECT_EQ(decode<NormParameters>("rms_norm_grad", {{"epsilon", real(1e-6)}})
                .epsilon,
            1e-6);
  EXPECT_EQ(decode<LossParameters>("cross_entropy_grad",
                                   {{"normalizer", integer(4096)}})
                .normalizer,
            4096);
  EmbeddingParameters embedding =
      decode<EmbeddingParameters>("embedding", {{"vocab_offset", integer(512)},
                                                {"padding_idx", integer(0)}});
  EXPECT_EQ(embedding.vocabOffset, 512);
  EXPECT_EQ(embedding.paddingIndex, 0);

  AttrValue frequencies;
  frequencies.kind = AttrKind::Reals;
  frequencies.reals = {1.0, 0.5};
  PositionParameters rope =
      decode<PositionParameters>("rope", {{"frequencies", frequencies},
                                          {"inverse", flag(true)},
                                          {"interleaved", flag(true)},
                                          {"chunks", integer(2)}});
  EXPECT_EQ(rope.frequencies, (std::vector<double>{1.0, 0.5}));
  EXPECT_TRUE(rope.inverse);
  EXPECT_TRUE(rope.interleaved);
  EXPECT_EQ(rope.chunks, 2);

  EXPECT_EQ(
      decode<ReductionParameters>("reduce_max", {{"dims", ints({0, 2})}}).dims,
      (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(
      decode<LayoutParameters>("transpose", {{"permutation", ints({1, 0})}})
          .permutation,
      (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(decode<LayoutParameters>(
                "slice", {{"offsets", ints({2})}, {"sizes", ints({3})}})
                .offsets,
            (std::vector<int64_t>{2}));
  EXPECT_EQ(
      decode<LayoutParameters>("pad", {{"low", ints({1})}, {"high", ints({0})}})
          .low,
      (std::vector<int64_t>{1}));
  EXPECT_EQ(decode<LayoutParameters>("concat", {{"dim", integer(1)}}).dim, 1);

  EXPECT_EQ(
      decode<FusedElementwiseParameters>(
          "fused_elementwise", {{"program", AttrValue::ofStrings({"exp %0"})}})
          .program,
      std::vector<std::string>{"exp %0"});
}

// Tests that each collective reads its own fields, reduce kinds included.
TEST(OpParametersTest, CollectivesReadTheirFields) {
  EXPECT_EQ(
      decode<CollectiveParameters>("all_reduce", {{"kind", text("max")}}).kind,
      ReduceKind::Max);
  CollectiveParameters scatter = decode<CollectiveParameters>(
      "reduce_scatter", {{"kind", text("min")}, {"dim", integer(1)}});
  EXPECT_EQ(scatter.kind, ReduceKind::Min);
  EXPECT_EQ(scatter.dim, 1);
  CollectiveParameters exchange = decode<CollectiveParameters>(
      "all_to_all", {{"split_dim", integer(2)}, {"concat_dim", integer(1)}});
  EXPECT_EQ(exchange.splitDim, 2);
  EXPECT_EQ(exchange.concatDim, 1);
  EXPECT_EQ(
      decode<CollectiveParameters>("broadcast", {{"root", integer(3)}}).root,
      3);
  EXPECT_EQ(decode<CollectiveParameters>("collective_permute",
                                         {{"shift", integer(1)}})
                .shift,
            1);
  CollectiveParameters send = decode<CollectiveParameters>(
      "send", {{"peer", integer(1)}, {"channel", integer(5)}});
  EXPECT_EQ(send.peer, 1);
  EXPECT_EQ(send.channel, 5);
}

} // namespace
