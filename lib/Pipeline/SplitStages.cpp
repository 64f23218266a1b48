//===- SplitStages.cpp - A step of micro-batches as per-stage programs ----===//

#include "trellis/Pipeline/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Pipeline/PipelineSplit.h"

#include <limits>
#include <numeric>

namespace trellis {
#define GEN_PASS_DEF_SPLITSTAGESPASS
#include "trellis/Pipeline/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// Where a program comes among one micro-batch's actions on its rank: its
/// action's place (orderInMicroBatch), its receives just before it.
int64_t programOrder(const ActionProgram &program, int64_t rank,
                     int64_t ranks, int64_t chunks) {
  if (program.kind == ActionKind::Step)
    return std::numeric_limits<int64_t>::max();
  int64_t order = orderInMicroBatch(
      program.kind, program.chunk * ranks + rank, ranks * chunks);
  return 2 * order + (program.receives ? 0 : 1);
}

struct SplitStagesPass
    : public trellis::impl::SplitStagesPassBase<SplitStagesPass> {
  using SplitStagesPassBase::SplitStagesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>(functionName);
    if (!step || step.isExternal()) {
      module.emitError() << "expected a function @" << functionName
                         << " to split into stages, found none";
      return signalPassFailure();
    }
    PipelineConfig config;
    config.pieceAxis = pieceAxis;
    FailureOr<PipelineProgram> program = splitPipeline(step, config);
    if (failed(program))
      return signalPassFailure();
    FlatSymbolRefAttr mesh;
    if (program->ranks() > 1) {
      mesh = createPipelineMesh(module, step, program->ranks());
      if (!mesh)
        return signalPassFailure();
    }
    for (int64_t rank = 0; rank < program->ranks(); ++rank)
      materialize(module, step, *program, rank, mesh);
    step.erase();
  }

  /// `@pipeline`: the pipeline axis and the step's mesh axes, in
  /// mesh-order (default: the pipeline axis major). Null after a
  /// diagnostic.
  FlatSymbolRefAttr createPipelineMesh(ModuleOp module, func::FuncOp step,
                                       int64_t stages) {
    MLIRContext *context = &getContext();
    SmallVector<MeshAxisAttr> stepAxes;
    step.walk([&](Operation *op) {
      if (!stepAxes.empty())
        return;
      if (auto name = op->getAttrOfType<FlatSymbolRefAttr>("mesh"))
        if (MeshOp found = lookupMesh(op, name, [&] { return op->emitError(); }))
          stepAxes.assign(found.getMesh().getAxes().begin(),
                          found.getMesh().getAxes().end());
    });
    for (unsigned i = 0; i < step.getNumArguments() && stepAxes.empty(); ++i)
      if (auto sharding = step.getArgAttrOfType<ShardingAttr>(
              i, TrellisDialect::kShardingAttrName))
        if (MeshOp found = lookupMesh(step, sharding.getMeshName(),
                                      [&] { return step.emitError(); }))
          stepAxes.assign(found.getMesh().getAxes().begin(),
                          found.getMesh().getAxes().end());
    SmallVector<MeshAxisAttr> axes;
    MeshAxisAttr pipelineAxis =
        MeshAxisAttr::get(context, axis, stages, AxisRole::Pipeline);
    if (meshOrder.empty()) {
      axes.push_back(pipelineAxis);
      axes.append(stepAxes.begin(), stepAxes.end());
    } else {
      for (const std::string &name : meshOrder) {
        if (name == axis) {
          axes.push_back(pipelineAxis);
          continue;
        }
        auto found = llvm::find_if(stepAxes, [&](MeshAxisAttr stepAxis) {
          return stepAxis.getName() == name;
        });
        axes.push_back(found != stepAxes.end()
                           ? *found
                           : MeshAxisAttr::get(context, name, 1));
      }
      for (MeshAxisAttr stepAxis : stepAxes)
        if (!llvm::is_contained(meshOrder, stepAxis.getName().str())) {
          step.emitError() << "mesh-order lacks the step's axis '"
                           << stepAxis.getName() << "'";
          return {};
        }
    }
    if (module.lookupSymbol("pipeline")) {
      module.emitError("a symbol @pipeline exists already");
      return {};
    }
    OpBuilder builder(context);
    builder.setInsertionPointToStart(module.getBody());
    MeshOp::create(builder, module.getLoc(), "pipeline",
                   MeshAttr::get(context, axes));
    return FlatSymbolRefAttr::get(context, "pipeline");
  }

  /// Writes `rank`'s programs as `@<step>.stage<rank>`.
  void materialize(ModuleOp module, func::FuncOp step,
                   const PipelineProgram &split, int64_t rank,
                   FlatSymbolRefAttr mesh) {
    MLIRContext *context = &getContext();
    OpBuilder builder(context);
    builder.setInsertionPoint(step);
    const std::vector<ActionProgram> &programs = split.programs[rank];
    Block &body = step.getBody().front();
    Operation *terminator = body.getTerminator();

    // Results this stage holds.
    SmallVector<unsigned> results;
    for (auto [index, holders] : llvm::enumerate(split.resultRanks))
      if (llvm::is_contained(holders, rank))
        results.push_back(index);
    SmallVector<Type> resultTypes;
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned index : results) {
      resultTypes.push_back(terminator->getOperand(index).getType());
      NamedAttrList attrs(step.getResultAttrDict(index));
      attrs.set(TrellisDialect::kResultIndexAttrName,
                builder.getI64IntegerAttr(index));
      resultAttrs.push_back(attrs.getDictionary(context));
    }
    auto stage = func::FuncOp::create(
        builder, step.getLoc(),
        (step.getSymName() + ".stage" + llvm::Twine(rank)).str(),
        builder.getFunctionType(step.getArgumentTypes(), resultTypes));
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      NamedAttrList attrs(step.getArgAttrDict(i));
      if (llvm::is_contained(split.argumentRanks[i], rank))
        attrs.set(TrellisDialect::kHeldAttrName, builder.getUnitAttr());
      argAttrs.push_back(attrs.getDictionary(context));
    }
    stage.setAllArgAttrs(argAttrs);
    stage.setAllResultAttrs(resultAttrs);
    for (NamedAttribute attr : step->getDiscardableAttrs())
      stage->setAttr(attr.getName(), attr.getValue());
    stage->setAttr(TrellisDialect::kPipelineStageAttrName,
                   builder.getI64IntegerAttr(rank));
    stage->setAttr(TrellisDialect::kStageOfAttrName,
                   builder.getStringAttr(step.getSymName()));

    Block *stageBody = stage.addEntryBlock();
    IRMapping mapping;
    for (auto [from, to] :
         llvm::zip(body.getArguments(), stageBody->getArguments()))
      mapping.map(from, to);
    builder.setInsertionPointToStart(stageBody);
    // Programs in an order every use follows its definition in.
    SmallVector<size_t> order(programs.size());
    std::iota(order.begin(), order.end(), 0);
    llvm::stable_sort(order, [&](size_t a, size_t b) {
      return programOrder(programs[a], rank, split.ranks(), split.chunks) <
             programOrder(programs[b], rank, split.ranks(), split.chunks);
    });
    ArrayAttr axes = builder.getStrArrayAttr({axis});
    for (size_t index : order) {
      const ActionProgram &program = programs[index];
      StringAttr name = builder.getStringAttr(program.name());
      StringAttr phase;
      if (program.kind != ActionKind::Step)
        phase = builder.getStringAttr(
            program.kind == ActionKind::Forward    ? "forward"
            : program.kind == ActionKind::Backward ? "backward"
                                                   : "weight");
      for (const StageItem &item : program.items) {
        Operation *made = nullptr;
        if (item.kind == StageItem::Kind::Op) {
          made = builder.clone(*item.op, mapping);
        } else {
          const StageTransfer &transfer = split.transfers[item.transfer];
          if (item.kind == StageItem::Kind::Send) {
            made = SendOp::create(builder, step.getLoc(),
                                  mapping.lookup(transfer.value), mesh, axes,
                                  builder.getI64IntegerAttr(transfer.to),
                                  builder.getI64IntegerAttr(transfer.channel));
          } else {
            auto recv = RecvOp::create(
                builder, step.getLoc(), transfer.value.getType(), mesh, axes,
                builder.getI64IntegerAttr(transfer.from),
                builder.getI64IntegerAttr(transfer.channel));
            mapping.map(transfer.value, recv.getResult());
            made = recv;
          }
        }
        made->setAttr(TrellisDialect::kProgramAttrName, name);
        // A transfer of a micro-batch runs in the micro-batch's phase.
        if (item.kind != StageItem::Kind::Op && phase)
          made->setAttr(graph::GraphDialect::kPhaseAttrName, phase);
      }
    }
    SmallVector<Value> returned;
    for (unsigned index : results)
      returned.push_back(mapping.lookup(terminator->getOperand(index)));
    func::ReturnOp::create(builder, step.getLoc(), returned);
  }
};

} // namespace
