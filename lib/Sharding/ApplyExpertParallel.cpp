//===- ApplyExpertParallel.cpp - Expert parallelism as annotations --------===//
//
// Expert parallelism (GShard, Lepikhin et al., 2020; Megatron-Core's
// expert model parallelism) as shardings: the experts' stacked weights are
// split along their expert dimension over the mesh's expert axes, the
// batch as over any data axis. Each expert op reads its tokens whole over
// the expert axes (an all_gather the partitioner derives), computes the
// slots routed to the rank's experts (zeros elsewhere: a partial sum over
// the expert axes, by the op table's rule for expert ops with `axes`), and
// its result goes back to the batch's split (a reduce_scatter). The
// experts' gradients, computed from every token of the expert group, are
// partial over the data axes alone.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <tuple>

namespace trellis {
#define GEN_PASS_DEF_APPLYEXPERTPARALLELPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct ApplyExpertParallelPass
    : public trellis::impl::ApplyExpertParallelPassBase<
          ApplyExpertParallelPass> {
  using ApplyExpertParallelPassBase::ApplyExpertParallelPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto function = module.lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      module.emitError() << "expected a training step @" << functionName
                         << " to split over experts, found none";
      return signalPassFailure();
    }
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (mesh) {
      mesh_ = mesh.getMesh();
      for (StringAttr axis : mesh_.getAxesWithRole(AxisRole::Expert))
        if (mesh_.getGroupSize(axis) > 1)
          experts_.push_back(axis);
      for (StringAttr axis : mesh_.getAxesWithRole(AxisRole::Data))
        if (mesh_.getGroupSize(axis) > 1)
          data_.push_back(axis);
      for (StringAttr axis : mesh_.getAxesWithRole(AxisRole::Context))
        if (mesh_.getGroupSize(axis) > 1)
          context_.push_back(axis);
      for (StringAttr axis : mesh_.getBatchAxes())
        if (mesh_.getGroupSize(axis) > 1)
          batch_.push_back(axis);
    }
    if (experts_.empty())
      return;
    SmallVector<Operation *> expertOps;
    function.walk([&](Operation *op) {
      if (llvm::isa<graph::ExpertMatmulOp, graph::ExpertMatmulWeightGradOp>(op))
        expertOps.push_back(op);
    });
    int64_t ep = mesh_.getGroupSize(experts_);
    if (expertOps.empty()) {
      function.emitError()
          << "expert parallelism splits experts over " << axesText() << " = "
          << ep
          << ": expected a model with mixture-of-experts layers "
             "(expert_matmul), found none";
      return signalPassFailure();
    }
    llvm::SetVector<StringAttr> weightNames;
    for (Operation *op : expertOps) {
      if (failed(annotate(function, op, ep, weightNames)))
        return signalPassFailure();
    }
    if (failed(splitWeights(function, weightNames)))
      return signalPassFailure();
  }

private:
  std::string axesText() const {
    std::string text;
    for (StringAttr axis : experts_)
      text += (text.empty() ? "" : "x") + axis.str();
    return text;
  }

  /// The layout of a token operand or result of an expert op whose slots
  /// are [tokens..., k]: the batch (the first token dimension) split over
  /// `batchAxes` where they divide it, the sequence (the second, when the
  /// tokens have two) over the context axes, the rest whole.
  ShardingAttr tokenLayout(Value value, int64_t tokenDims,
                           ArrayRef<StringAttr> batchAxes) {
    MLIRContext *context = &getContext();
    auto type = llvm::cast<RankedTensorType>(value.getType());
    SmallVector<DimShardingAttr> dims(type.getRank(),
                                      DimShardingAttr::get(context, {}, false));
    if (!batchAxes.empty() &&
        type.getDimSize(0) % mesh_.getGroupSize(batchAxes) == 0)
      dims[0] = DimShardingAttr::get(context, batchAxes, false);
    if (tokenDims >= 2 && !context_.empty() &&
        type.getDimSize(1) % mesh_.getGroupSize(context_) == 0)
      dims[1] = DimShardingAttr::get(context, context_, false);
    return ShardingAttr::get(context, FlatSymbolRefAttr::get(context, "mesh"),
                             dims);
  }

  /// A constraint on `value` as `op` reads it (operand `index`): one per
  /// value, layout and phase, before its first reader there, so that the
  /// readers of a phase share one gather (the ids every expert op reads)
  /// and no gathered copy lives from the forward into the backward.
  void constrainOperand(Operation *op, unsigned index, ShardingAttr layout) {
    Value value = op->getOperand(index);
    Attribute phase = op->getAttr(graph::GraphDialect::kPhaseAttrName);
    auto [it, inserted] =
        constrained_.try_emplace(std::make_tuple(value, layout, phase));
    if (inserted) {
      OpBuilder builder(op);
      auto constraint = ShardOp::create(builder, op->getLoc(), value.getType(),
                                        value, layout);
      graph::copyPlacement(op, constraint);
      it->second = constraint.getResult();
    }
    op->setOperand(index, it->second);
  }

  /// A constraint on `value` where `op` makes it, for every reader.
  void constrainResult(Operation *op, Value value, ShardingAttr layout) {
    OpBuilder builder(op->getContext());
    builder.setInsertionPointAfter(op);
    auto constraint =
        ShardOp::create(builder, op->getLoc(), value.getType(), value, layout);
    graph::copyPlacement(op, constraint);
    value.replaceAllUsesExcept(constraint.getResult(), constraint);
  }

  LogicalResult annotate(func::FuncOp function, Operation *op, int64_t ep,
                         llvm::SetVector<StringAttr> &weightNames) {
    MLIRContext *context = &getContext();
    bool forward = llvm::isa<graph::ExpertMatmulOp>(op);
    Value slots = op->getOperand(2);
    int64_t tokenDims =
        llvm::cast<RankedTensorType>(slots.getType()).getRank() - 1;
    int64_t experts =
        forward
            ? llvm::cast<RankedTensorType>(op->getOperand(1).getType())
                  .getDimSize(0)
            : llvm::cast<graph::ExpertMatmulWeightGradOp>(op).getNumExperts();
    if (experts % ep != 0)
      return op->emitOpError()
             << "splits its " << experts << " experts over " << axesText()
             << " = " << ep << ": expected the expert count divisible by "
             << ep;
    op->setAttr("axes",
                ArrayAttr::get(context, SmallVector<Attribute>(
                                            experts_.begin(), experts_.end())));
    // The tokens whole over the expert axes where the op reads them (the
    // weight gradient's result gradient too).
    for (unsigned i :
         forward ? SmallVector<unsigned>{0, 2} : SmallVector<unsigned>{0, 1, 2})
      constrainOperand(op, i, tokenLayout(op->getOperand(i), tokenDims, data_));
    if (!forward)
      return success();
    constrainResult(op, op->getResult(0),
                    tokenLayout(op->getResult(0), tokenDims, batch_));
    // The weight: a parameter, perhaps cast to the compute dtype, perhaps
    // a slice of every expert (the gate or up half of a fused gate_up
    // projection) or reshaped with its experts first (a bias [E, N] read
    // as [E, 1, N]).
    Value weight = op->getOperand(1);
    while (true) {
      if (auto cast = weight.getDefiningOp<graph::CastOp>()) {
        weight = cast.getInput();
        continue;
      }
      if (auto reshape = weight.getDefiningOp<graph::ReshapeOp>()) {
        auto from = llvm::cast<RankedTensorType>(reshape.getInput().getType());
        auto to = llvm::cast<RankedTensorType>(reshape.getType());
        if (from.getRank() >= 1 && from.getDimSize(0) == to.getDimSize(0)) {
          weight = reshape.getInput();
          continue;
        }
      }
      auto slice = weight.getDefiningOp<graph::SliceOp>();
      if (slice && slice.getOffsets()[0] == 0 &&
          slice.getSizes()[0] ==
              llvm::cast<RankedTensorType>(slice.getInput().getType())
                  .getDimSize(0)) {
        weight = slice.getInput();
        continue;
      }
      break;
    }
    auto argument = llvm::dyn_cast<BlockArgument>(weight);
    auto name = argument ? function.getArgAttrOfType<StringAttr>(
                               argument.getArgNumber(),
                               graph::GraphDialect::kParamNameAttrName)
                         : StringAttr();
    if (!name)
      return op->emitOpError()
             << "splits its experts over " << axesText()
             << ": expected its weight to be a parameter (through casts, "
                "slices of every expert and reshapes keeping the experts "
                "first), "
                "found "
             << (weight.getDefiningOp()
                     ? weight.getDefiningOp()->getName().getStringRef()
                     : StringRef("an argument without a name"));
    weightNames.insert(name);
    return success();
  }

  /// Splits the expert weights and their optimizer states (arguments of
  /// the same name) along the expert dimension.
  /// (The expert ops checked that the expert count divides.)
  LogicalResult splitWeights(func::FuncOp function,
                             const llvm::SetVector<StringAttr> &weightNames) {
    MLIRContext *context = &getContext();
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto name = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kParamNameAttrName);
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      if (!name || !weightNames.contains(name) || !role ||
          role.getValue() == "input")
        continue;
      auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
      if (auto existing = function.getArgAttrOfType<ShardingAttr>(
              i, TrellisDialect::kShardingAttrName)) {
        for (DimShardingAttr dim : existing.getDims())
          if (!dim.getAxes().empty())
            return function.emitError()
                   << "expert weight \"" << name.getValue()
                   << "\" is split already (" << existing
                   << "): expert parallelism splits it along its experts "
                      "over "
                   << axesText();
      }
      SmallVector<DimShardingAttr> dims(
          type.getRank(), DimShardingAttr::get(context, {}, false));
      dims[0] = DimShardingAttr::get(context, experts_, false);
      function.setArgAttr(
          i, TrellisDialect::kShardingAttrName,
          ShardingAttr::get(context, FlatSymbolRefAttr::get(context, "mesh"),
                            dims));
    }
    return success();
  }

  MeshAttr mesh_;
  /// The mesh's axes of more than one rank: expert, data, context, and
  /// the batch's (data and expert), major to minor.
  SmallVector<StringAttr> experts_, data_, context_, batch_;
  /// The constraints made so far, by value, layout and phase.
  DenseMap<std::tuple<Value, Attribute, Attribute>, Value> constrained_;
};

} // namespace
