//===- AssignStages.cpp - Ops of the micro-batch onto pipeline stages -----===//

#include "trellis/Pipeline/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Analysis/PipelineCost.h"
#include "trellis/Analysis/StageSplit.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

namespace trellis {
#define GEN_PASS_DEF_ASSIGNSTAGESPASS
#include "trellis/Pipeline/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// The virtual stage of `part` under `split` (layers per virtual stage):
/// the embedding on the first, the head on the last.
int64_t virtualStageOf(graph::PartAttr part, const StageLayers &split) {
  int64_t stages = static_cast<int64_t>(split.size());
  if (part.isEmbedding())
    return 0;
  if (part.isHead())
    return stages - 1;
  int64_t first = 0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    first += split[stage];
    if (part.getLayer() < first)
      return stage;
  }
  return stages - 1;
}

struct AssignStagesPass
    : public trellis::impl::AssignStagesPassBase<AssignStagesPass> {
  using AssignStagesPassBase::AssignStagesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      module.emitError() << "expected a function @" << functionName
                         << " to cut into pipeline stages, found none";
      return signalPassFailure();
    }
    auto microBatches = step->getAttrOfType<IntegerAttr>(
        graph::GraphDialect::kMicroBatchesAttrName);
    if (!microBatches) {
      step.emitError() << "expected a step of micro-batches "
                          "(graph.micro_batches): differentiate it with "
                          "micro-batches or for a pipeline";
      return signalPassFailure();
    }
    PipelineShape shape{stages, microBatches.getInt(), chunks};
    std::string error;
    std::optional<PipelineStreams> streams =
        buildSchedule(schedule, shape, &error);
    if (!streams) {
      step.emitError() << "pipeline schedule: " << error;
      return signalPassFailure();
    }
    std::optional<StageLayers> split = chooseSplit(module, step, *streams,
                                                   shape);
    if (!split)
      return signalPassFailure();
    if (failed(markOps(step, *split)))
      return signalPassFailure();
    Builder builder(&getContext());
    step->setAttr(TrellisDialect::kPipelineStagesAttrName,
                  builder.getI64IntegerAttr(stages));
    step->setAttr(TrellisDialect::kPipelineChunksAttrName,
                  builder.getI64IntegerAttr(chunks));
    step->setAttr(TrellisDialect::kStageLayersAttrName,
                  builder.getDenseI64ArrayAttr(*split));
    step->setAttr(TrellisDialect::kPipelineScheduleAttrName,
                  builder.getStringAttr(scheduleKindName(schedule)));
  }

  /// `layers` checked against the model, or the balanced split of
  /// `@forward`'s costs; nullopt after a diagnostic.
  std::optional<StageLayers> chooseSplit(ModuleOp module, func::FuncOp step,
                                         const PipelineStreams &streams,
                                         const PipelineShape &shape) {
    bool given = !layers.empty();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    StagedModelCost model;
    if (forward) {
      FailureOr<ModelPipelineCost> cost =
          computePipelineCost(forward, RooflineRates());
      if (failed(cost))
        return std::nullopt;
      model = cost->parts;
    } else if (!given) {
      step.emitError("expected a function @forward for the cost model of a "
                     "balanced split, or layers per stage");
      return std::nullopt;
    } else {
      // Only the number of layers matters for a given split.
      step.walk([&](Operation *op) {
        if (graph::PartAttr part = graph::getModelPart(op); part &&
            part.isLayer() &&
            part.getLayer() >= static_cast<int64_t>(model.layers.size()))
          model.layers.resize(part.getLayer() + 1);
      });
    }
    std::string error;
    if (given) {
      StageLayers split(layers.begin(), layers.end());
      if (!verifyStageLayers(split, model.layers.size(),
                             shape.virtualStages(), &error)) {
        step.emitError() << "layers: " << error;
        return std::nullopt;
      }
      return split;
    }
    std::optional<StageLayers> split =
        chooseStageLayers(model, "", streams, shape,
                          ModelPipelineCost::forwardShare, &error);
    if (!split)
      step.emitError() << error;
    return split;
  }

  /// Marks every op of the micro-batch with its virtual stage: by part,
  /// else by its users, else by its operands.
  LogicalResult markOps(func::FuncOp step, const StageLayers &split) {
    Block &body = step.getBody().front();
    llvm::DenseMap<Operation *, int64_t> stageOf;
    SmallVector<Operation *> unplaced, totals;
    for (Operation &op : body.without_terminator()) {
      if (llvm::isa<graph::MicrobatchSumOp>(op)) {
        totals.push_back(&op);
        continue;
      }
      if (!op.hasAttr(graph::GraphDialect::kPhaseAttrName))
        continue;
      if (split.size() == 1)
        stageOf[&op] = 0;
      else if (graph::PartAttr part = graph::getModelPart(&op))
        stageOf[&op] = virtualStageOf(part, split);
      else
        unplaced.push_back(&op);
    }
    for (Operation *op : llvm::reverse(unplaced)) {
      int64_t stage = -1;
      for (Operation *user : op->getUsers())
        if (auto it = stageOf.find(user); it != stageOf.end())
          stage = stage < 0 ? it->second : std::min(stage, it->second);
      if (stage >= 0)
        stageOf[op] = stage;
    }
    for (Operation *op : unplaced) {
      if (stageOf.count(op))
        continue;
      for (Value operand : op->getOperands())
        if (Operation *producer = operand.getDefiningOp())
          if (auto it = stageOf.find(producer);
              it != stageOf.end() && !stageOf.count(op))
            stageOf[op] = it->second;
      if (!stageOf.count(op))
        return op->emitOpError()
               << "has no pipeline stage: it declares no model part "
                  "(graph.part) and no user or operand has one";
    }
    // A micro-batch's value joins its step total where it is made.
    for (Operation *total : totals) {
      Operation *producer = total->getOperand(0).getDefiningOp();
      auto it = producer ? stageOf.find(producer) : stageOf.end();
      if (it == stageOf.end())
        return total->emitOpError()
               << "sums a value over micro-batches that no op of the "
                  "micro-batch makes (expected an operand marked with "
                  "graph.phase)";
      stageOf[total] = it->second;
    }
    Builder builder(step.getContext());
    for (auto [op, stage] : stageOf)
      op->setAttr(TrellisDialect::kStageAttrName,
                  builder.getI64IntegerAttr(stage));
    return success();
  }
};

} // namespace
