//===- PlanEmitterTest.cpp - Stage programs the plan cannot express -------===//
//
// emitStagedPlan on hand-written stage functions (as trellis-split-stages
// and the schedule would leave them) that lack what a staged plan needs:
// each is a diagnostic naming what is missing.
//
//===----------------------------------------------------------------------===//

#include "trellis/Target/Plan/PlanEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

#include <gtest/gtest.h>

namespace {

/// The diagnostics of emitting the stages of @train_step in `text`.
std::string emitErrors(const std::string &text) {
  mlir::MLIRContext context;
  context.loadDialect<trellis::graph::GraphDialect, trellis::TrellisDialect,
                      mlir::func::FuncDialect>();
  std::string errors;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    errors += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  EXPECT_TRUE(module) << errors;
  if (!module)
    return errors;
  EXPECT_TRUE(mlir::failed(
      trellis::emitStagedPlan(*module, "train_step", trellis::PlanMetadata())));
  return errors;
}

/// One stage function: `attributes` and `body` filled in.
std::string stage(int index, const std::string &attributes,
                  const std::string &results, const std::string &body) {
  return "func.func @train_step.stage" + std::to_string(index) +
         "(%x: tensor<4xf32> {graph.role = \"param\", graph.param = \"x\", "
         "graph.init = \"ones\"}) -> (" +
         results + ") attributes {trellis.pipeline_stage = " +
         std::to_string(index) +
         " : i64, trellis.stage_of = \"train_step\", "
         "trellis.schedule = [\"step\"]" +
         attributes + "} {\n" + body + "}\n";
}

const std::string kReturn = "  return %x : tensor<4xf32>\n";
const std::string kResult0 = "tensor<4xf32> {trellis.result = 0 : i64}";

TEST(PlanEmitterTest, StagesOfAPipelineNeedThePipelineMesh) {
  std::string text =
      stage(0, ", graph.micro_batches = 1 : i64", kResult0, kReturn) +
      stage(1, ", graph.micro_batches = 1 : i64", "", "  return\n");
  EXPECT_NE(emitErrors(text).find("expected the pipeline's mesh @pipeline"),
            std::string::npos);
}

TEST(PlanEmitterTest, AStageBelongsToAStepOfMicroBatches) {
  EXPECT_NE(emitErrors(stage(0, "", kResult0, kReturn))
                .find("expected a stage of a step of micro-batches "
                      "(graph.micro_batches)"),
            std::string::npos);
}

TEST(PlanEmitterTest, EveryOpBelongsToAnActionProgram) {
  std::string body = "  %y = graph.neg %x : tensor<4xf32>\n"
                     "  return %y : tensor<4xf32>\n";
  EXPECT_NE(emitErrors(stage(0, ", graph.micro_batches = 1 : i64", kResult0,
                             body))
                .find("'graph.neg' op belongs to no action program "
                      "(trellis.program)"),
            std::string::npos);
}

TEST(PlanEmitterTest, EveryResultOfTheStepHasAStage) {
  std::string results = "tensor<4xf32> {trellis.result = 1 : i64}";
  EXPECT_NE(emitErrors(stage(0, ", graph.micro_batches = 1 : i64", results,
                             kReturn))
                .find("no stage holds result 0 of the step"),
            std::string::npos);
}

} // namespace
