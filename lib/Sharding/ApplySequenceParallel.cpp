//===- ApplySequenceParallel.cpp - Megatron SP as annotations -------------===//
//
// Megatron sequence parallelism (Korthikanti et al., 2022) written as
// layout constraints: the residual stream entering each norm is split
// along the sequence over the tensor-parallel axis, and each norm's result
// is whole again before the tensor-parallel matmuls read it. The
// partitioner derives the collectives: a row-parallel matmul's partial
// output meeting the split residual stream is a reduce_scatter (instead of
// an all_reduce), the split norm output meeting its whole use an
// all_gather; the backward follows from the forward's layouts, but for the
// embedding's gradient, gathered along the sequence before the
// vocabulary-parallel table's gradient reads it.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/MapVector.h"

namespace trellis {
#define GEN_PASS_DEF_APPLYSEQUENCEPARALLELPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct ApplySequenceParallelPass
    : public trellis::impl::ApplySequenceParallelPassBase<
          ApplySequenceParallelPass> {
  using ApplySequenceParallelPassBase::ApplySequenceParallelPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto function = module.lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      module.emitError() << "expected a training step @" << functionName
                         << " to split along the sequence, found none";
      return signalPassFailure();
    }
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    // The axis given, else the mesh's tensor axis (named tp by the
    // presets).
    axisName_ = axis;
    if (axisName_.empty() && mesh)
      if (SmallVector<StringAttr> tensor =
              mesh.getMesh().getAxesWithRole(AxisRole::Tensor);
          tensor.size() == 1)
        axisName_ = tensor.front().str();
    if (axisName_.empty())
      axisName_ = "tp";
    int64_t size = mesh ? mesh.getMesh().getAxisSize(axisName_) : 1;
    if (size <= 1) {
      function.emitError()
          << "sequence parallelism splits the norm regions over the "
             "tensor-parallel axis \""
          << axisName_ << "\": expected " << axisName_ << " > 1, found "
          << (mesh ? "a mesh with " + axisName_ + "=" + std::to_string(size)
                   : std::string("no mesh"));
      return signalPassFailure();
    }
    meshName_ = FlatSymbolRefAttr::get(&getContext(), "mesh");
    size_ = size;
    mesh_ = mesh;
    readInputSplit(function);
    SmallVector<Operation *> norms;
    function.walk([&](Operation *op) {
      const OpContract *row = graph::contractOf(op);
      if (row && row->family == OpFamily::Norm && !row->gradient)
        norms.push_back(op);
    });
    // The sequence splits over the context axes and then the tensor axis.
    SmallVector<StringAttr> sequenceAxes = contextAxes_;
    sequenceAxes.push_back(StringAttr::get(&getContext(), axisName_));
    std::string over;
    for (StringAttr axis : sequenceAxes)
      over += (over.empty() ? "" : ",") + axis.str() + "=" +
              std::to_string(piecesOf(axis));
    for (Operation *norm : norms) {
      auto type = llvm::cast<RankedTensorType>(norm->getOperand(0).getType());
      int64_t sequence =
          type.getRank() >= 3 ? type.getDimSize(type.getRank() - 2) : 0;
      if (type.getRank() >= 3 && sequence % piecesOf(sequenceAxes) != 0) {
        norm->emitOpError()
            << "sequence parallelism splits the sequence of " << type
            << " over " << over << ": expected a sequence divisible by "
            << piecesOf(sequenceAxes) << ", found " << sequence;
        return signalPassFailure();
      }
      splitAlongSequence(norm->getOperand(0));
      wholeForUsers(norm->getResult(0));
    }
    // The embedding's gradient reaches it split along the sequence; its
    // table splits the vocabulary over the same axis. Gathered along the
    // sequence first (as Megatron does), each rank's embedding_grad makes
    // its vocabulary shard's gradient; else it would scatter its sequence
    // piece over the whole vocabulary, a gradient partial over the axis
    // and the table's whole size, accumulated whole every micro-batch.
    function.walk([&](graph::EmbeddingGradOp gradient) {
      wholeOperand(gradient->getOpOperand(1));
    });
  }

private:
  /// The layout of a [batch, ..., sequence, features] value: the batch and
  /// the sequence split as the step's inputs split them (data and context
  /// parallelism keep their split through the norm regions), and the
  /// sequence also over the tensor axis when `split`.
  ShardingAttr layoutOf(RankedTensorType type, bool split) {
    MLIRContext *context = &getContext();
    SmallVector<DimShardingAttr> dims(type.getRank(),
                                      DimShardingAttr::get(context, {}, false));
    int64_t sequenceDim = type.getRank() - 2;
    if (sequenceDim > 0 && !batchAxes_.empty() &&
        type.getDimSize(0) % piecesOf(batchAxes_) == 0)
      dims[0] = DimShardingAttr::get(context, batchAxes_, false);
    SmallVector<StringAttr> sequenceAxes = contextAxes_;
    if (split)
      sequenceAxes.push_back(StringAttr::get(context, axisName_));
    if (type.getDimSize(sequenceDim) % piecesOf(sequenceAxes) == 0)
      dims[sequenceDim] = DimShardingAttr::get(context, sequenceAxes, false);
    return ShardingAttr::get(context, meshName_, dims);
  }

  /// Constrains `value` (the residual stream a norm reads) to be split
  /// along its sequence, for every user: where it is made.
  void splitAlongSequence(Value value) {
    auto type = llvm::cast<RankedTensorType>(value.getType());
    Operation *producer = value.getDefiningOp();
    if (!producer || llvm::isa<ShardOp>(producer) || type.getRank() < 3)
      return;
    OpBuilder builder(producer->getContext());
    builder.setInsertionPointAfter(producer);
    auto constraint = ShardOp::create(builder, producer->getLoc(), type, value,
                                      layoutOf(type, true));
    graph::copyPlacement(producer, constraint);
    value.replaceAllUsesExcept(constraint.getResult(), constraint);
  }

  /// Constrains `value` (a norm's output, split along the sequence) to be
  /// whole for its users (the tensor-parallel matmuls): an all_gather,
  /// once per phase of its users, so that the backward (the weight
  /// gradients) gathers again instead of keeping the forward's copy.
  void wholeForUsers(Value value) {
    auto type = llvm::cast<RankedTensorType>(value.getType());
    Operation *producer = value.getDefiningOp();
    if (type.getRank() < 3 || value.use_empty())
      return;
    llvm::MapVector<Attribute, SmallVector<OpOperand *>> byPhase;
    for (OpOperand &use : value.getUses())
      byPhase[use.getOwner()->getAttr(graph::GraphDialect::kPhaseAttrName)]
          .push_back(&use);
    for (auto &[phase, uses] : byPhase) {
      Operation *first = uses.front()->getOwner();
      for (OpOperand *use : uses)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      OpBuilder builder(producer->getContext());
      if (phase == producer->getAttr(graph::GraphDialect::kPhaseAttrName))
        builder.setInsertionPointAfter(producer);
      else
        builder.setInsertionPoint(first);
      auto constraint = ShardOp::create(builder, producer->getLoc(), type,
                                        value, layoutOf(type, false));
      graph::copyPlacement(producer, constraint);
      if (phase)
        constraint->setAttr(graph::GraphDialect::kPhaseAttrName, phase);
      for (OpOperand *use : uses)
        use->set(constraint.getResult());
    }
  }

  /// Constrains `operand` whole along the sequence over the tensor axis
  /// (an all_gather where it arrives split), right before its reader.
  void wholeOperand(OpOperand &operand) {
    auto type = llvm::cast<RankedTensorType>(operand.get().getType());
    if (type.getRank() < 3)
      return;
    Operation *reader = operand.getOwner();
    OpBuilder builder(reader);
    auto constraint = ShardOp::create(builder, reader->getLoc(), type,
                                      operand.get(), layoutOf(type, false));
    graph::copyPlacement(reader, constraint);
    if (Attribute phase = reader->getAttr(graph::GraphDialect::kPhaseAttrName))
      constraint->setAttr(graph::GraphDialect::kPhaseAttrName, phase);
    operand.set(constraint.getResult());
  }

  /// The axes the step's inputs ([batch, sequence, ...]) split their
  /// batch and their sequence over: the first input with a sharding.
  void readInputSplit(func::FuncOp function) {
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      auto sharding = function.getArgAttrOfType<ShardingAttr>(
          i, TrellisDialect::kShardingAttrName);
      if (!role || role.getValue() != "input" || !sharding ||
          sharding.getDims().size() < 2)
        continue;
      batchAxes_.assign(sharding.getDims()[0].getAxes().begin(),
                        sharding.getDims()[0].getAxes().end());
      contextAxes_.assign(sharding.getDims()[1].getAxes().begin(),
                          sharding.getDims()[1].getAxes().end());
      return;
    }
  }

  int64_t piecesOf(ArrayRef<StringAttr> axes) {
    return mesh_.getMesh().getGroupSize(axes);
  }

  FlatSymbolRefAttr meshName_;
  MeshOp mesh_;
  SmallVector<StringAttr> batchAxes_, contextAxes_;
  /// The axis the sequence splits over.
  std::string axisName_;
  int64_t size_ = 1;
};

} // namespace
