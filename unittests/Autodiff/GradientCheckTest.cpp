//===- GradientCheckTest.cpp - Gradients of every op, by finite differences
//===//
//
// Each case builds loss = sum(f(params) * r) with r a random parameter, so
// that every output element has its own weight, and checks the gradient of
// every parameter (r's too) against central differences.
//
//===----------------------------------------------------------------------===//

#include "GradientCheck.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Frontend/ModelImporter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace trellis::testing;

namespace {

/// A parameter argument declaration.
std::string param(const std::string &name, const std::string &type) {
  return "%" + name + ": " + type +
         " {graph.role = \"param\", graph.param = \"" + name +
         "\", graph.init = \"zeros\"}";
}

std::string allDims(int rank) {
  std::string dims = "[";
  for (int d = 0; d < rank; ++d)
    dims += (d ? ", " : "") + std::to_string(d);
  return dims + "]";
}

/// A module whose loss is sum(body result * r). `args` are extra argument
/// declarations; `body` computes `%y` of `resultType` (rank `rank`).
std::string weightedLoss(const std::vector<std::string> &args,
                         const std::string &body, const std::string &resultType,
                         int rank) {
  std::string signature;
  for (const std::string &arg : args)
    signature += arg + ", ";
  signature += param("r", resultType);
  return "func.func @forward(" + signature + ") -> tensor<f32> {\n" + body +
         "\n  %weighted = graph.mul %y, %r : " + resultType + ", " +
         resultType + "\n  %loss = graph.reduce_sum %weighted dims " +
         allDims(rank) + " : " + resultType +
         "\n  return %loss : tensor<f32>\n}\n";
}

void expectGradientsMatch(const std::string &source,
                          GradientCheckOptions options = {}) {
  GradientCheckResult result = checkGradients(source, options);
  EXPECT_FALSE(result.failure) << *result.failure << "\n" << source;
  EXPECT_GT(result.checked, 0);
}

const char *kMatrix = "tensor<3x4xf32>";

TEST(GradientCheck, BinaryOpsWithBroadcasting) {
  for (const char *op : {"add", "sub", "mul", "div", "maximum"}) {
    std::string body = std::string("  %y = graph.") + op +
                       " %a, %b : tensor<3x4xf32>, tensor<4xf32>";
    if (std::string(op) == "div")
      body = "  %e = graph.exp %b : tensor<4xf32>\n"
             "  %y = graph.div %a, %e : tensor<3x4xf32>, tensor<4xf32>";
    SCOPED_TRACE(op);
    expectGradientsMatch(weightedLoss(
        {param("a", kMatrix), param("b", "tensor<4xf32>")}, body, kMatrix, 2));
  }
}

TEST(GradientCheck, ScaleAndBroadcastTo) {
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<3x1xf32>")},
      "  %s = graph.scale %a by 2.5 : tensor<3x1xf32>\n"
      "  %y = graph.broadcast_to %s to [2, 3, 4] : tensor<3x1xf32>",
      "tensor<2x3x4xf32>", 3));
}

TEST(GradientCheck, UnaryOps) {
  // log, sqrt and rsqrt see exp(x) > 0.
  for (const char *op :
       {"neg", "exp", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "relu",
        "softplus", "abs", "log", "sqrt", "rsqrt"}) {
    std::string name = op;
    bool positive = name == "log" || name == "sqrt" || name == "rsqrt";
    std::string body =
        positive ? "  %p = graph.exp %a : tensor<3x4xf32>\n  %y = graph." +
                       name + " %p : tensor<3x4xf32>"
                 : "  %y = graph." + name + " %a : tensor<3x4xf32>";
    SCOPED_TRACE(op);
    expectGradientsMatch(weightedLoss({param("a", kMatrix)}, body, kMatrix, 2));
  }
}

TEST(GradientCheck, Reductions) {
  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    SCOPED_TRACE(op);
    expectGradientsMatch(weightedLoss({param("a", "tensor<2x3x4xf32>")},
                                      std::string("  %y = graph.") + op +
                                          " %a dims [0, 2] : tensor<2x3x4xf32>",
                                      "tensor<3xf32>", 1));
    expectGradientsMatch(
        weightedLoss({param("a", "tensor<2x3x4xf32>")},
                     std::string("  %y = graph.") + op +
                         " %a dims [1] keep_dims : tensor<2x3x4xf32>",
                     "tensor<2x1x4xf32>", 3));
  }
}

TEST(GradientCheck, LayoutOps) {
  expectGradientsMatch(
      weightedLoss({param("a", "tensor<2x3x4xf32>")},
                   "  %y = graph.reshape %a to [6, 4] : tensor<2x3x4xf32>",
                   "tensor<6x4xf32>", 2));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<2x3x4xf32>")},
      "  %y = graph.transpose %a perm [2, 0, 1] : tensor<2x3x4xf32>",
      "tensor<4x2x3xf32>", 3));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<4x5xf32>")},
      "  %y = graph.slice %a offsets [1, 2] sizes [2, 3] : tensor<4x5xf32>",
      "tensor<2x3xf32>", 2));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<2x3xf32>")},
      "  %y = graph.pad %a low [1, 0] high [0, 2] : tensor<2x3xf32>",
      "tensor<3x5xf32>", 2));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<2x3xf32>"), param("b", "tensor<2x2xf32>")},
      "  %y = graph.concat %a, %b dim 1 : tensor<2x3xf32>, tensor<2x2xf32>",
      "tensor<2x5xf32>", 2));
}

TEST(GradientCheck, MatmulEveryLayout) {
  struct Case {
    const char *lhs, *rhs, *flags, *result;
    int rank;
  };
  for (Case c :
       {Case{"tensor<3x4xf32>", "tensor<4x5xf32>", "", "tensor<3x5xf32>", 2},
        Case{"tensor<4x3xf32>", "tensor<4x5xf32>", "lt", "tensor<3x5xf32>", 2},
        Case{"tensor<3x4xf32>", "tensor<5x4xf32>", "rt", "tensor<3x5xf32>", 2},
        Case{"tensor<4x3xf32>", "tensor<5x4xf32>", "lt rt", "tensor<3x5xf32>",
             2},
        Case{"tensor<2x3x4xf32>", "tensor<2x4x5xf32>", "", "tensor<2x3x5xf32>",
             3},
        Case{"tensor<2x3x4xf32>", "tensor<4x5xf32>", "", "tensor<2x3x5xf32>",
             3},
        Case{"tensor<2x3x4xf32>", "tensor<5x4xf32>", "rt", "tensor<2x3x5xf32>",
             3},
        Case{"tensor<2x4x3xf32>", "tensor<4x5xf32>", "lt", "tensor<2x3x5xf32>",
             3}}) {
    std::string flags = c.flags;
    std::string body =
        std::string("  %y = graph.matmul %a") +
        (flags.find("lt") != std::string::npos ? " transposed" : "") + ", %b" +
        (flags.find("rt") != std::string::npos ? " transposed" : "") + " : " +
        c.lhs + ", " + c.rhs;
    SCOPED_TRACE(body);
    expectGradientsMatch(weightedLoss({param("a", c.lhs), param("b", c.rhs)},
                                      body, c.result, c.rank));
  }
}

TEST(GradientCheck, SoftmaxAndNorms) {
  expectGradientsMatch(weightedLoss({param("a", kMatrix)},
                                    "  %y = graph.softmax %a : tensor<3x4xf32>",
                                    kMatrix, 2));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<2x3x8xf32>"), param("w", "tensor<8xf32>"),
       param("b", "tensor<8xf32>")},
      "  %y = graph.layer_norm %a, %w, %b eps 1.0e-05 : tensor<2x3x8xf32>, "
      "tensor<8xf32>",
      "tensor<2x3x8xf32>", 3));
  expectGradientsMatch(weightedLoss(
      {param("a", "tensor<2x3x8xf32>"), param("w", "tensor<8xf32>")},
      "  %y = graph.rms_norm %a, %w eps 1.0e-05 : tensor<2x3x8xf32>, "
      "tensor<8xf32>",
      "tensor<2x3x8xf32>", 3));
}

TEST(GradientCheck, EmbeddingAndRope) {
  std::string ids = "%ids: tensor<2x3xi32> {graph.role = \"input\", "
                    "graph.param = \"tokens\"}";
  expectGradientsMatch(weightedLoss(
      {param("table", "tensor<5x4xf32>"), ids},
      "  %y = graph.embedding %table, %ids : tensor<5x4xf32>, tensor<2x3xi32>",
      "tensor<2x3x4xf32>", 3));
  for (const char *inverse : {"", " {inverse = true}"}) {
    SCOPED_TRACE(inverse);
    expectGradientsMatch(weightedLoss(
        {param("a", "tensor<2x5x3x4xf32>")},
        std::string("  %y = graph.rope %a frequencies [1.0, 0.01]") + inverse +
            " : tensor<2x5x3x4xf32>",
        "tensor<2x5x3x4xf32>", 4));
  }
}

TEST(GradientCheck, Attention) {
  const char *q = "tensor<2x5x4x3xf32>";
  for (const char *kv :
       {"tensor<2x5x4x3xf32>", "tensor<2x5x2x3xf32>", "tensor<2x5x1x3xf32>"})
    for (const char *causal : {"", " {causal = false}"}) {
      SCOPED_TRACE(std::string(kv) + causal);
      expectGradientsMatch(weightedLoss(
          {param("q", q), param("k", kv), param("v", kv)},
          std::string("  %y = graph.attention %q, %k, %v scale 0.5") + causal +
              " : " + q + ", " + kv,
          q, 4));
    }
}

TEST(GradientCheck, CrossEntropy) {
  expectGradientsMatch(
      "func.func @forward(" + param("logits", "tensor<2x3x7xf32>") +
      ", %t: tensor<2x3xi32> {graph.role = \"input\", graph.param = "
      "\"targets\"}) -> tensor<f32> {\n"
      "  %loss = graph.cross_entropy %logits, %t : tensor<2x3x7xf32>, "
      "tensor<2x3xi32>\n  return %loss : tensor<f32>\n}\n");
}

/// Whole tiny models: every parameter of every layer.
void checkModel(const std::string &config) {
  std::ifstream file(std::string(TRELLIS_EXAMPLES_DIR) + "/configs/" + config);
  ASSERT_TRUE(file) << config;
  std::stringstream text;
  text << file.rdbuf();
  llvm::Expected<trellis::TransformerConfig> parsed =
      trellis::parseTransformerConfig(text.str());
  ASSERT_TRUE(static_cast<bool>(parsed));
  mlir::MLIRContext context;
  auto module = trellis::importTransformer(context, *parsed, {2, 6});
  ASSERT_TRUE(static_cast<bool>(module));
  GradientCheckOptions options;
  options.paramScale = 0.3;
  options.samplesPerParam = 3;
  options.step = 5e-3;
  GradientCheckResult result = checkGradients(module->get(), options);
  EXPECT_FALSE(result.failure) << *result.failure;
  EXPECT_GT(result.checked, 50);
}

TEST(GradientCheck, TinyGpt2) { checkModel("gpt2-tiny.json"); }
TEST(GradientCheck, TinyLlama) { checkModel("llama-tiny.json"); }

} // namespace
