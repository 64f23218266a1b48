//===- ApplyZero.cpp - ZeRO stages as annotations -------------------------===//
//
// ZeRO (Rajbhandari et al., 2020) written as shardings over the
// data-parallel axes; propagation and partitioning derive its collectives:
// a partial gradient meeting a split optimizer state is a reduce_scatter,
// a split updated parameter meeting the replicated parameter of the next
// step an all_gather, a split parameter meeting a use that needs it whole
// an all_gather before that use.
//
//===----------------------------------------------------------------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/MapVector.h"

namespace trellis {
#define GEN_PASS_DEF_APPLYZEROPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// The per-dimension axes of `sharding` (or none: replicated, `rank` dims).
SmallVector<SmallVector<StringAttr>> axesOf(ShardingAttr sharding,
                                            int64_t rank) {
  SmallVector<SmallVector<StringAttr>> dims(rank);
  if (sharding)
    for (auto [d, dim] : llvm::enumerate(sharding.getDims()))
      dims[d].assign(dim.getAxes().begin(), dim.getAxes().end());
  return dims;
}

struct ApplyZeroPass : public trellis::impl::ApplyZeroPassBase<ApplyZeroPass> {
  using ApplyZeroPassBase::ApplyZeroPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stage < 0 || stage > 3) {
      module.emitError() << "expected ZeRO stage 0, 1, 2 or 3, found "
                         << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    if (stage == 0)
      return;
    auto function = module.lookupSymbol<func::FuncOp>(functionName);
    if (!function || function.isExternal()) {
      module.emitError() << "expected a training step @" << functionName
                         << " to shard with ZeRO, found none";
      return signalPassFailure();
    }
    if (failed(findMesh(module, function)))
      return signalPassFailure();
    context_ = &getContext();
    argAttrs_.clear();
    ownAxes_.clear();
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      argAttrs_.emplace_back(function.getArgAttrDict(i));
      // An argument already split over expert axes (expert parallelism's
      // weights and states) keeps that split: ZeRO shards it over its
      // other axes, and ZeRO-3 gathers only those.
      ownAxes_.emplace_back();
      if (auto layout = function.getArgAttrOfType<ShardingAttr>(
              i, TrellisDialect::kShardingAttrName))
        for (DimShardingAttr dim : layout.getDims())
          for (StringAttr name : dim.getAxes())
            if (llvm::is_contained(expertAxes_, name))
              ownAxes_.back().push_back(name);
    }

    // Stage 1: optimizer states (moments, fp32 masters); stage 3 also the
    // parameters. Stage 2 shards what stage 1 does, and its gradients are
    // reduce-scattered where the backward makes them (below).
    bool anyState = false;
    SmallVector<std::string> unsplit;
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      if (!role)
        continue;
      bool state = role.getValue() == "adam_m" ||
                   role.getValue() == "adam_v" || role.getValue() == "master";
      bool param = role.getValue() == "param";
      anyState |= state;
      if (param && stage < 3) {
        // Below stage 3 every rank keeps its parameters: their layout is
        // fixed, so that no split state propagates onto them.
        if (!argAttrs_[i].get(TrellisDialect::kShardingAttrName))
          argAttrs_[i].set(TrellisDialect::kShardingAttrName,
                           replicated(function, i));
        continue;
      }
      if (!state && !param)
        continue;
      if (!splitOverData(function, i)) {
        auto name = function.getArgAttrOfType<StringAttr>(
            i, graph::GraphDialect::kParamNameAttrName);
        unsplit.push_back((role.getValue() + " " +
                           (name ? name.getValue() : StringRef("?")))
                              .str());
      }
    }
    if (!anyState && stage < 3) {
      function.emitError()
          << "ZeRO-" << static_cast<int64_t>(stage)
          << " shards optimizer states, and the step has none (an optimizer "
             "with moments, or mixed precision's fp32 masters): expected "
             "AdamW or a mixed-precision step, found none";
      return signalPassFailure();
    }
    if (!unsplit.empty()) {
      InFlightDiagnostic warning = function.emitWarning();
      warning << unsplit.size() << " tensor(s) stay replicated over \""
              << axesText() << "\": every dimension is split already and none "
              << "divides further by " << dataSize_ << " (";
      for (auto [k, name] : llvm::enumerate(unsplit))
        warning << (k ? ", " : "") << name;
      warning << ")";
    }
    SmallVector<DictionaryAttr> dictionaries;
    for (NamedAttrList &attrs : argAttrs_)
      dictionaries.push_back(attrs.getDictionary(context_));
    function.setAllArgAttrs(dictionaries);
    sinkGradientCasts(function);
    if (stage >= 2)
      constrainGradients(function);
    else
      constrainSharedStepGradients(function);
    if (stage == 3)
      gatherBeforeUses(function);
  }

private:
  /// The mesh of the step: the one its annotations name, else @mesh, and
  /// the axes to shard over (the option's, else the mesh's batch axes);
  /// together they must have more than one rank.
  LogicalResult findMesh(ModuleOp module, func::FuncOp function) {
    FlatSymbolRefAttr name;
    for (unsigned i = 0; i < function.getNumArguments() && !name; ++i)
      if (auto sharding = function.getArgAttrOfType<ShardingAttr>(
              i, TrellisDialect::kShardingAttrName))
        name = sharding.getMeshName();
    if (!name)
      name = FlatSymbolRefAttr::get(&getContext(), "mesh");
    auto mesh = module.lookupSymbol<MeshOp>(name.getAttr());
    dataAxes_.clear();
    if (mesh && axes.empty()) {
      for (StringAttr batchAxis : mesh.getMesh().getBatchAxes())
        if (mesh.getMesh().getAxisSize(batchAxis.getValue()) > 1)
          dataAxes_.push_back(batchAxis);
    }
    for (const std::string &given : axes) {
      if (mesh && !mesh.getMesh().getAxisIndex(given)) {
        function.emitError() << "ZeRO-" << static_cast<int64_t>(stage)
                             << ": expected axes of the mesh "
                             << mesh.getMesh().getMesh().toString()
                             << ", found \"" << given << "\"";
        return failure();
      }
      dataAxes_.push_back(StringAttr::get(&getContext(), given));
    }
    int64_t size = mesh ? mesh.getMesh().getGroupSize(dataAxes_) : 1;
    if (!mesh || size <= 1) {
      // The axes meant: those given or found, else the mesh's batch axes
      // (of one rank), else the name the presets use.
      if (dataAxes_.empty() && mesh)
        dataAxes_ = mesh.getMesh().getBatchAxes();
      std::string shown = dataAxes_.empty() ? "dp" : axesText();
      function.emitError()
          << "ZeRO-" << static_cast<int64_t>(stage)
          << " shards over the data-parallel axis \"" << shown
          << "\": expected a mesh with " << shown << " > 1, found "
          << (mesh ? "the mesh " + mesh.getMesh().getMesh().toString()
                   : std::string("no mesh"));
      return failure();
    }
    meshName_ = name;
    dataSize_ = size;
    expertAxes_ = mesh.getMesh().getAxesWithRole(AxisRole::Expert);
    return success();
  }

  /// The data axes as messages name them: `dp`, `replica x shard`.
  std::string axesText() const {
    std::string text;
    for (StringAttr dataAxis : dataAxes_)
      text += (text.empty() ? "" : " x ") + dataAxis.getValue().str();
    return text;
  }

  /// Adds the data-parallel axes to argument `i`'s sharding, on the first
  /// dimension whose size divides by it: a whole dimension first (dimension
  /// 0 preferred: each rank's piece is contiguous), else one split by
  /// another axis whose piece divides further. False if none does.
  bool splitOverData(func::FuncOp function, unsigned i) {
    auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
    auto existing = llvm::dyn_cast_if_present<ShardingAttr>(
        argAttrs_[i].get(TrellisDialect::kShardingAttrName));
    SmallVector<SmallVector<StringAttr>> dims =
        axesOf(existing, type.getRank());
    SmallVector<StringAttr> axes = zeroAxes(i);
    if (axes.empty())
      return true; // split over every ZeRO axis by expert parallelism
    int64_t size = 1;
    for (StringAttr axis : axes)
      size *= axisSize(axis);
    for (const auto &dimAxes : dims)
      for (StringAttr dataAxis : axes)
        if (llvm::is_contained(dimAxes, dataAxis))
          return true; // the user split it over dp already
    std::optional<int64_t> chosen;
    for (int64_t d = 0; d < type.getRank() && !chosen; ++d)
      if (dims[d].empty() && type.getDimSize(d) % size == 0)
        chosen = d;
    for (int64_t d = 0; d < type.getRank() && !chosen; ++d) {
      int64_t piece = type.getDimSize(d);
      for (StringAttr other : dims[d])
        piece /= axisSize(other);
      if (!dims[d].empty() && piece % size == 0)
        chosen = d;
    }
    // Else the largest whole dimension, unevenly: its last pieces are
    // padded (the argument records its global shape in trellis.padded).
    bool padded = false;
    for (int64_t d = 0; d < type.getRank() && !chosen; ++d)
      if (dims[d].empty() && type.getDimSize(d) > 1) {
        int64_t largest = d;
        for (int64_t e = d + 1; e < type.getRank(); ++e)
          if (dims[e].empty() && type.getDimSize(e) > type.getDimSize(largest))
            largest = e;
        chosen = largest;
        padded = true;
      }
    if (!chosen)
      return false;
    if (padded)
      argAttrs_[i].set(TrellisDialect::kPaddedAttrName,
                       DenseI64ArrayAttr::get(context_, type.getShape()));
    dims[*chosen].append(axes.begin(), axes.end());
    SmallVector<DimShardingAttr> attrs;
    for (const auto &dimAxes : dims)
      attrs.push_back(DimShardingAttr::get(context_, dimAxes, false));
    argAttrs_[i].set(TrellisDialect::kShardingAttrName,
                     ShardingAttr::get(context_, meshName_, attrs));
    return true;
  }

  /// The replicated layout of argument `i`.
  ShardingAttr replicated(func::FuncOp function, unsigned i) {
    auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
    SmallVector<DimShardingAttr> dims(
        type.getRank(), DimShardingAttr::get(context_, {}, false));
    return ShardingAttr::get(context_, meshName_, dims);
  }

  int64_t axisSize(StringAttr name) {
    auto mesh = getOperation().lookupSymbol<MeshOp>(meshName_.getAttr());
    return mesh.getMesh().getAxisSize(name.getValue());
  }

  /// A gradient reduced in the compute dtype (--grad-reduce-dtype bf16, one
  /// micro-batch) is cast back to f32 (graph.reduce_first) by the update,
  /// not where the backward made it: the step holds it in bf16 until then,
  /// whole (ZeRO-1: reduce-scattered there, once per step) or as its piece
  /// (ZeRO-2 and 3: reduce-scattered where it was made).
  void sinkGradientCasts(func::FuncOp function) {
    SmallVector<Operation *> casts;
    function.walk([&](graph::CastOp cast) {
      if (cast->hasAttr(graph::GraphDialect::kReduceFirstAttrName))
        casts.push_back(cast);
    });
    for (Operation *cast : casts) {
      Operation *first = nullptr;
      for (Operation *user : cast->getResult(0).getUsers())
        if (!first || user->isBeforeInBlock(first))
          first = user;
      if (first && cast->isBeforeInBlock(first))
        cast->moveBefore(first);
      // It belongs to the update now: what the partitioner inserts for it
      // (ZeRO-1's reduce_scatter) runs with the step.
      cast->removeAttr(graph::GraphDialect::kPhaseAttrName);
    }
  }

  /// ZeRO-2: each parameter's gradient is reduce-scattered as soon as a
  /// micro-batch has made it (in the backward), into a sharded accumulator
  /// when the step has several micro-batches, and its full buffer dies
  /// there. A constraint (trellis.shard, in the gradient's micro-batch
  /// phase and model part, right after the op that makes it) lays out each
  /// gradient a micro-batch hands to the step as the split state of the
  /// parameter it updates.
  void constrainGradients(func::FuncOp function) {
    for (auto [gradient, layout] : splitGradients(function))
      constrainMicroBatchValues(*gradient, layout);
  }

  /// The gradient operand of each update whose state is split over dp, with
  /// that state's layout.
  SmallVector<std::pair<OpOperand *, ShardingAttr>>
  splitGradients(func::FuncOp function) {
    SmallVector<std::pair<OpOperand *, ShardingAttr>> gradients;
    function.walk([&](Operation *op) {
      if (!graph::isUpdate(op))
        return;
      if (ShardingAttr layout = splitStateLayout(op))
        gradients.emplace_back(
            &op->getOpOperand(graph::contractOf(op)->effects.gradientOperand),
            layout);
    });
    return gradients;
  }

  /// ZeRO-1: a step's gradient that more than its update reads (clipping's
  /// squares, fp16's verdict) is reduce-scattered once, where the step has
  /// it, and every reader takes the split piece; left to the partitioner,
  /// a reader that needs it reduced but not split all-reduces it whole
  /// besides the update's reduce-scatter. The gradient is found from the
  /// update through the scalings it reads it by (clipping's factor).
  void constrainSharedStepGradients(func::FuncOp function) {
    for (auto [use, layout] : splitGradients(function)) {
      Value gradient = use->get();
      while (Operation *scaling = gradient.getDefiningOp()) {
        if (!llvm::isa<graph::MulOp, graph::DivOp>(scaling) ||
            scaling->hasAttr(graph::GraphDialect::kPhaseAttrName) ||
            llvm::cast<RankedTensorType>(scaling->getOperand(1).getType())
                    .getRank() != 0)
          break;
        gradient = scaling->getOperand(0);
      }
      Operation *producer = gradient.getDefiningOp();
      if (producer && !llvm::isa<ShardOp>(producer) && !gradient.hasOneUse())
        constrainEveryReader(gradient, layout);
    }
  }

  /// A `trellis.shard` laying `value` out as `layout` right after the op
  /// that makes it (padded where the layout does not divide it), which
  /// every reader of `value` then reads.
  ShardOp constrainEveryReader(Value value, ShardingAttr layout) {
    Operation *producer = value.getDefiningOp();
    OpBuilder builder(context_);
    builder.setInsertionPointAfter(producer);
    auto constraint = ShardOp::create(builder, producer->getLoc(),
                                      value.getType(), value, layout);
    auto type = llvm::cast<RankedTensorType>(value.getType());
    if (!layoutDivides(layout, type))
      constraint->setAttr(TrellisDialect::kPaddedAttrName,
                          DenseI64ArrayAttr::get(context_, type.getShape()));
    value.replaceAllUsesExcept(constraint.getResult(), constraint);
    return constraint;
  }

  /// Follows `use` back through the step's ops (no graph.phase: sums over
  /// micro-batches, the tied parameters' adds, the loss scale's division)
  /// to the values the micro-batch made, and constrains each of them.
  void constrainMicroBatchValues(OpOperand &use, ShardingAttr layout) {
    Value value = use.get();
    Operation *producer = value.getDefiningOp();
    auto shape = llvm::cast<RankedTensorType>(value.getType()).getShape();
    if (!producer || llvm::isa<ShardOp>(producer))
      return;
    // A gradient reduced in the compute dtype is split before its cast
    // back to f32 (graph.reduce_first, sunk to the update).
    if (!producer->hasAttr(graph::GraphDialect::kPhaseAttrName) ||
        producer->hasAttr(graph::GraphDialect::kReduceFirstAttrName)) {
      for (OpOperand &operand : producer->getOpOperands())
        if (llvm::cast<RankedTensorType>(operand.get().getType()).getShape() ==
            shape)
          constrainMicroBatchValues(operand, layout);
      return;
    }
    // Every reader takes the split piece: one that needs the gradient
    // reduced (clipping's squares) would otherwise all-reduce it whole.
    ShardOp constraint = constrainEveryReader(value, layout);
    constraint->setAttr(graph::GraphDialect::kPhaseAttrName,
                        producer->getAttr(graph::GraphDialect::kPhaseAttrName));
    if (graph::PartAttr part = graph::getModelPart(producer))
      graph::setModelPart(constraint, part);
  }

  /// The layout of the state `update` (an optimizer op) keeps split over
  /// dp: its first argument operand of the parameter's shape that is.
  ShardingAttr splitStateLayout(Operation *update) {
    auto shape =
        llvm::cast<RankedTensorType>(update->getOperand(0).getType()).getShape();
    for (Value operand : update->getOperands()) {
      auto arg = llvm::dyn_cast<BlockArgument>(operand);
      if (!arg ||
          llvm::cast<RankedTensorType>(arg.getType()).getShape() != shape)
        continue;
      auto layout = llvm::dyn_cast_if_present<ShardingAttr>(
          argAttrs_[arg.getArgNumber()].get(TrellisDialect::kShardingAttrName));
      if (layout && usesData(layout, zeroAxes(arg.getArgNumber())))
        return layout;
    }
    return {};
  }

  /// ZeRO-3: a parameter stored split over dp is used whole. Its uses are
  /// grouped by micro-batch phase and model part; each group reads it
  /// through its own constraint (trellis.shard, the stored layout without
  /// dp), so the partitioner all-gathers it once per part and phase: the
  /// forward's copy dies after the part, and the backward gathers again.
  /// The constraint sits where the part that runs before it in the same
  /// phase begins, so the gather is in flight while that part computes
  /// (FSDP's prefetch); the optimizer reads the stored piece.
  void gatherBeforeUses(func::FuncOp function) {
    OpBuilder builder(context_);
    // Where each (phase, part) begins.
    llvm::MapVector<std::pair<Attribute, Attribute>, Operation *> begins;
    for (Operation &op : function.getBody().front())
      begins.try_emplace({op.getAttr(graph::GraphDialect::kPhaseAttrName),
                          graph::getModelPart(&op)},
                         &op);
    // The op before which a group of uses in (phase, part) starts its
    // gather: the beginning of the latest other part of the phase that
    // begins before this part does, else the group's first use.
    auto prefetchPoint = [&](std::pair<Attribute, Attribute> key,
                             Operation *firstUse) {
      auto own = begins.find(key);
      Operation *begin = own != begins.end() ? own->second : firstUse;
      Operation *point = nullptr;
      for (auto &[other, op] : begins)
        if (other.first == key.first && other.second != key.second &&
            op->isBeforeInBlock(begin) &&
            (!point || point->isBeforeInBlock(op)))
          point = op;
      return point && point->isBeforeInBlock(firstUse) ? point : firstUse;
    };
    for (BlockArgument param : function.getArguments()) {
      auto role = function.getArgAttrOfType<StringAttr>(
          param.getArgNumber(), graph::GraphDialect::kRoleAttrName);
      auto stored = function.getArgAttrOfType<ShardingAttr>(
          param.getArgNumber(), TrellisDialect::kShardingAttrName);
      SmallVector<StringAttr> axes = zeroAxes(param.getArgNumber());
      if (!role || role.getValue() != "param" || !stored ||
          !usesData(stored, axes))
        continue;
      SmallVector<DimShardingAttr> wholeDims;
      for (DimShardingAttr dim : stored.getDims()) {
        SmallVector<StringAttr> kept;
        for (StringAttr name : dim.getAxes())
          if (!llvm::is_contained(axes, name))
            kept.push_back(name);
        wholeDims.push_back(DimShardingAttr::get(context_, kept, false));
      }
      auto whole = ShardingAttr::get(context_, meshName_, wholeDims);
      // Uses by (phase, part), in block order.
      llvm::MapVector<std::pair<Attribute, Attribute>, SmallVector<OpOperand *>>
          groups;
      for (OpOperand &use : param.getUses()) {
        Operation *user = use.getOwner();
        if (graph::isUpdate(user))
          continue;
        groups[{user->getAttr(graph::GraphDialect::kPhaseAttrName),
                graph::getModelPart(user)}]
            .push_back(&use);
      }
      for (auto &[key, uses] : groups) {
        Operation *first = uses.front()->getOwner();
        for (OpOperand *use : uses)
          if (use->getOwner()->isBeforeInBlock(first))
            first = use->getOwner();
        builder.setInsertionPoint(prefetchPoint(key, first));
        auto gathered = ShardOp::create(builder, first->getLoc(),
                                        param.getType(), param, whole);
        if (key.first)
          gathered->setAttr(graph::GraphDialect::kPhaseAttrName, key.first);
        if (auto part = llvm::dyn_cast_if_present<graph::PartAttr>(key.second))
          graph::setModelPart(gathered, part);
        for (OpOperand *use : uses)
          use->set(gathered.getResult());
      }
    }
  }

  /// Whether every split of `layout` divides its dimension of `type`.
  bool layoutDivides(ShardingAttr layout, RankedTensorType type) {
    for (auto [d, dim] : llvm::enumerate(layout.getDims())) {
      int64_t pieces = 1;
      for (StringAttr name : dim.getAxes())
        pieces *= axisSize(name);
      if (type.getDimSize(d) % pieces != 0)
        return false;
    }
    return true;
  }

  bool usesData(ShardingAttr layout, ArrayRef<StringAttr> axes) {
    for (DimShardingAttr dim : layout.getDims())
      for (StringAttr name : dim.getAxes())
        if (llvm::is_contained(axes, name))
          return true;
    return false;
  }

  /// The axes ZeRO shards argument `i` over: the ZeRO axes but the expert
  /// axes it is split over already.
  SmallVector<StringAttr> zeroAxes(unsigned i) const {
    SmallVector<StringAttr> axes;
    for (StringAttr axis : dataAxes_)
      if (i >= ownAxes_.size() || !llvm::is_contained(ownAxes_[i], axis))
        axes.push_back(axis);
    return axes;
  }

  MLIRContext *context_ = nullptr;
  FlatSymbolRefAttr meshName_;
  /// The axes ZeRO shards over, major to minor, and their ranks.
  SmallVector<StringAttr> dataAxes_;
  int64_t dataSize_ = 1;
  /// The mesh's expert axes, and per argument those it was split over
  /// before ZeRO.
  SmallVector<StringAttr> expertAxes_;
  SmallVector<SmallVector<StringAttr>> ownAxes_;
  SmallVector<NamedAttrList> argAttrs_;
};

} // namespace
