//===- TrellisDialect.cpp - The trellis dialect ---------------------------===//

#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

using namespace mlir;
using namespace trellis;

#include "trellis/Dialect/Trellis/IR/TrellisOpsDialect.cpp.inc"

void TrellisDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "trellis/Dialect/Trellis/IR/TrellisOps.cpp.inc"
      >();
}

namespace {

/// Checks a `trellis.sharding` attribute on an argument or result of type
/// `type` of the function-like `op`.
LogicalResult verifyShardingAttribute(Operation *op, NamedAttribute attr,
                                      Type type, StringRef what,
                                      unsigned index, bool allowPadding) {
  auto emitError = [&]() {
    return op->emitOpError() << what << " " << index << ": ";
  };
  if (attr.getName() != TrellisDialect::kShardingAttrName)
    return op->emitOpError()
           << "unknown trellis attribute '" << attr.getName().getValue()
           << "' on " << what << " " << index << "; expected '"
           << TrellisDialect::kShardingAttrName << "'";
  auto sharding = llvm::dyn_cast<ShardingAttr>(attr.getValue());
  if (!sharding)
    return op->emitOpError()
           << "expected '" << TrellisDialect::kShardingAttrName << "' on "
           << what << " " << index << " to be a #trellis.sharding, found "
           << attr.getValue();
  MeshOp mesh = lookupMesh(op, sharding.getMeshName(), emitError);
  if (!mesh)
    return failure();
  bool local = op->hasAttr(TrellisDialect::kPartitionedAttrName);
  return sharding.verifyForType(emitError, mesh.getMesh(), type, local,
                                allowPadding);
}

/// Checks a trellis.padded attribute: the global shape of a value of
/// `type` (local in a partitioned function).
LogicalResult verifyPaddedAttribute(Operation *op, NamedAttribute attr,
                                    Type type) {
  auto shape = llvm::dyn_cast<DenseI64ArrayAttr>(attr.getValue());
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!shape || !tensor || shape.size() != tensor.getRank() ||
      llvm::any_of(shape.asArrayRef(), [](int64_t size) { return size < 0; }))
    return op->emitOpError()
           << "expected '" << TrellisDialect::kPaddedAttrName
           << "' to be the global shape of a " << type << ", found "
           << attr.getValue();
  return success();
}

} // namespace

LogicalResult TrellisDialect::verifyOperationAttribute(Operation *op,
                                                       NamedAttribute attr) {
  if (attr.getName() == kPartitionedAttrName) {
    if (!llvm::isa<UnitAttr>(attr.getValue()) ||
        !llvm::isa<FunctionOpInterface>(op))
      return op->emitOpError() << "'" << kPartitionedAttrName
                               << "' is a unit attribute of functions";
    return success();
  }
  if (attr.getName() == kLocalLayoutAttrName) {
    if (!llvm::isa<ShardingAttr>(attr.getValue()) || op->getNumResults() != 1)
      return op->emitOpError()
             << "expected '" << kLocalLayoutAttrName
             << "' to hold the #trellis.sharding of the op's one result";
    return success();
  }
  if (attr.getName() == kResultShardingsAttrName) {
    auto shardings = llvm::dyn_cast<ArrayAttr>(attr.getValue());
    if (!shardings || shardings.size() != op->getNumResults() ||
        !llvm::all_of(shardings,
                      [](Attribute a) { return llvm::isa<ShardingAttr>(a); }))
      return op->emitOpError()
             << "expected '" << kResultShardingsAttrName << "' to hold "
             << op->getNumResults() << " #trellis.sharding, one per result";
    for (auto [result, sharding] : llvm::zip(op->getResults(), shardings)) {
      auto emitError = [&]() {
        return op->emitOpError() << "result sharding: ";
      };
      auto attr = llvm::cast<ShardingAttr>(sharding);
      MeshOp mesh = lookupMesh(op, attr.getMeshName(), emitError);
      // Propagation carries a padded split through the ops that take one.
      if (!mesh || failed(attr.verifyForType(emitError, mesh.getMesh(),
                                             result.getType(), false,
                                             /*allowPadding=*/true)))
        return failure();
    }
    return success();
  }
  if (attr.getName() == kPipelineStagesAttrName ||
      attr.getName() == kPipelineChunksAttrName) {
    auto count = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    if (!count || count.getValue().slt(1))
      return op->emitOpError() << "expected '" << attr.getName().getValue()
                               << "' to be an integer >= 1, found "
                               << attr.getValue();
    return success();
  }
  if (attr.getName() == kStageLayersAttrName) {
    auto layers = llvm::dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!layers || llvm::any_of(layers.asArrayRef(),
                                [](int64_t count) { return count < 1; }))
      return op->emitOpError()
             << "expected '" << kStageLayersAttrName
             << "' to be an array of layer counts >= 1, found "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == kPipelineScheduleAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || !parseScheduleKind(name.getValue().str()))
      return op->emitOpError() << "expected '" << kPipelineScheduleAttrName
                               << "' to name a schedule (gpipe, 1f1b, "
                                  "interleaved or zb-h1), found "
                               << attr.getValue();
    return success();
  }
  if (attr.getName() == kStageAttrName ||
      attr.getName() == kPipelineStageAttrName) {
    auto index = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    if (!index || index.getValue().isNegative())
      return op->emitOpError() << "expected '" << attr.getName().getValue()
                               << "' to be an integer >= 0, found "
                               << attr.getValue();
    return success();
  }
  if (attr.getName() == kPaddedAttrName && llvm::isa<ShardOp>(op))
    return verifyPaddedAttribute(op, attr, op->getResult(0).getType());
  if (attr.getName() == kProgramAttrName ||
      attr.getName() == kStageOfAttrName) {
    if (!llvm::isa<StringAttr>(attr.getValue()))
      return op->emitOpError() << "expected '" << attr.getName().getValue()
                               << "' to be a name, found " << attr.getValue();
    return success();
  }
  if (attr.getName() == kScheduleAttrName) {
    auto schedule = llvm::dyn_cast<ArrayAttr>(attr.getValue());
    if (!schedule || !llvm::all_of(schedule, [](Attribute entry) {
          return llvm::isa<StringAttr>(entry);
        }))
      return op->emitOpError() << "expected '" << kScheduleAttrName
                               << "' to be an array of action names, found "
                               << attr.getValue();
    return success();
  }
  return op->emitOpError() << "unknown trellis attribute '"
                           << attr.getName().getValue() << "'";
}

LogicalResult TrellisDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                       unsigned argIndex,
                                                       NamedAttribute attr) {
  auto function = llvm::dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' is only valid on function arguments";
  if (attr.getName() == kHeldAttrName) {
    if (!llvm::isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << kHeldAttrName
                               << "' is a unit attribute of arguments";
    return success();
  }
  if (attr.getName() == kPaddedAttrName)
    return verifyPaddedAttribute(op, attr,
                                 function.getArgumentTypes()[argIndex]);
  if (attr.getName() == kSequenceChunksAttrName) {
    auto chunks = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    auto type = llvm::dyn_cast<RankedTensorType>(
        function.getArgumentTypes()[argIndex]);
    if (!chunks || chunks.getInt() < 2 || !type || type.getRank() < 2)
      return op->emitOpError()
             << "expected '" << kSequenceChunksAttrName
             << "' to be an integer >= 2 on an argument of rank >= 2 "
                "(dimension 1 the sequence), found "
             << attr.getValue() << " on " << function.getArgumentTypes()[argIndex];
    return success();
  }
  return verifyShardingAttribute(
      op, attr, function.getArgumentTypes()[argIndex], "argument", argIndex,
      static_cast<bool>(function.getArgAttr(argIndex, kPaddedAttrName)));
}

LogicalResult TrellisDialect::verifyRegionResultAttribute(Operation *op,
                                                          unsigned,
                                                          unsigned resultIndex,
                                                          NamedAttribute attr) {
  auto function = llvm::dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' is only valid on function results";
  if (attr.getName() == kResultIndexAttrName) {
    auto index = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    if (!index || index.getValue().isNegative())
      return op->emitOpError() << "expected '" << kResultIndexAttrName
                               << "' to be an integer >= 0, found "
                               << attr.getValue();
    return success();
  }
  return verifyShardingAttribute(op, attr,
                                 function.getResultTypes()[resultIndex],
                                 "result", resultIndex, false);
}
