//===- TrellisOps.cpp - Operations of the trellis dialect -----------------===//

#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace trellis;

/// A reduction kind as a bare keyword in op formats: `sum`, `max`, `min`.
static ParseResult parseReductionKind(OpAsmParser &parser,
                                      ReductionKindAttr &kind) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef name;
  if (parser.parseKeyword(&name))
    return failure();
  std::optional<ReductionKind> parsed = symbolizeReductionKind(name);
  if (!parsed)
    return parser.emitError(loc)
           << "expected a reduction kind (sum, max, min), found '" << name
           << "'";
  kind = ReductionKindAttr::get(parser.getContext(), *parsed);
  return success();
}

static void printReductionKind(OpAsmPrinter &printer, Operation *,
                               ReductionKindAttr kind) {
  printer << stringifyReductionKind(kind.getValue());
}

#define GET_OP_CLASSES
#include "trellis/Dialect/Trellis/IR/TrellisOps.cpp.inc"

MeshOp trellis::lookupMesh(Operation *from, FlatSymbolRefAttr meshName,
                           function_ref<InFlightDiagnostic()> emitError) {
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, meshName);
  if (!mesh)
    emitError() << "unknown mesh " << meshName;
  return mesh;
}

int64_t trellis::groupSizeOf(Operation *collective) {
  auto meshName = collective->getAttrOfType<FlatSymbolRefAttr>("mesh");
  auto axes = collective->getAttrOfType<ArrayAttr>("axes");
  if (!meshName || !axes)
    return 1;
  return meshAxesSize(
      SymbolTable::lookupNearestSymbolFrom<MeshOp>(collective, meshName), axes);
}

int64_t trellis::meshAxesSize(MeshOp mesh, ArrayAttr axes) {
  if (!mesh || !axes)
    return 1;
  int64_t size = 1;
  for (Attribute axis : axes)
    for (MeshAxisAttr meshAxis : mesh.getMesh().getAxes())
      if (meshAxis.getName() == llvm::cast<StringAttr>(axis).getValue())
        size *= meshAxis.getSize();
  return size;
}

//===----------------------------------------------------------------------===//
// ShardOp
//===----------------------------------------------------------------------===//

LogicalResult ShardOp::verifySymbolUses(SymbolTableCollection &) {
  auto emitError = [&]() { return emitOpError(); };
  MeshOp mesh = lookupMesh(*this, getSharding().getMeshName(), emitError);
  if (!mesh)
    return failure();
  return getSharding().verifyForType(
      emitError, mesh.getMesh(), getResult().getType(), false,
      static_cast<bool>((*this)->getAttr(TrellisDialect::kPaddedAttrName)));
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {

/// What every collective checks against its mesh: the mesh exists, the axis
/// list is non-empty, each axis is known and listed once. On success returns
/// the number of ranks in each group.
FailureOr<int64_t> verifyGroup(Operation *op, FlatSymbolRefAttr meshName,
                               ArrayAttr axes) {
  MeshOp mesh = lookupMesh(op, meshName, [&]() { return op->emitOpError(); });
  if (!mesh)
    return failure();
  if (axes.empty())
    return op->emitOpError() << "expected at least one mesh axis, found none";
  llvm::StringSet<> seen;
  int64_t groupSize = 1;
  for (Attribute axisAttr : axes) {
    StringRef axis = llvm::cast<StringAttr>(axisAttr).getValue();
    std::optional<size_t> index = mesh.getMesh().getAxisIndex(axis);
    if (!index)
      return op->emitOpError()
             << "unknown mesh axis \"" << axis << "\" in mesh " << meshName;
    if (!seen.insert(axis).second)
      return op->emitOpError()
             << "mesh axis \"" << axis << "\" is listed twice";
    groupSize *= mesh.getMesh().getAxes()[*index].getSize();
  }
  return groupSize;
}

LogicalResult verifyDimInRange(Operation *op, StringRef what, int64_t dim,
                               RankedTensorType type) {
  if (dim >= 0 && dim < type.getRank())
    return success();
  return op->emitOpError() << "expected " << what << " in [0, "
                           << type.getRank() << ") for operand type " << type
                           << ", found " << dim;
}

LogicalResult verifyDivisible(Operation *op, int64_t dim, RankedTensorType type,
                              int64_t groupSize, ArrayAttr axes) {
  if (type.getDimSize(dim) % groupSize == 0)
    return success();
  return op->emitOpError() << "dimension " << dim << " of size "
                           << type.getDimSize(dim)
                           << " is not divisible by the group size "
                           << groupSize << " of mesh axes " << axes;
}

LogicalResult verifyPositionInGroup(Operation *op, StringRef what,
                                    int64_t position, int64_t groupSize) {
  if (position >= 0 && position < groupSize)
    return success();
  return op->emitOpError() << "expected " << what << " in [0, " << groupSize
                           << ") (a position in the group), found " << position;
}

/// Compares the result type with the one that follows from the operand.
LogicalResult verifyResultType(Operation *op, RankedTensorType expected,
                               Type found, StringRef reason) {
  if (expected == found)
    return success();
  return op->emitOpError() << "expected result type " << expected << " ("
                           << reason << "), found " << found;
}

} // namespace

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyGroup(*this, getMeshAttr(), getAxes());
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> groupSize = verifyGroup(*this, getMeshAttr(), getAxes());
  if (failed(groupSize))
    return failure();
  auto inputType = llvm::cast<RankedTensorType>(getInput().getType());
  int64_t dim = getDim();
  if (failed(verifyDimInRange(*this, "dim", dim, inputType)))
    return failure();
  SmallVector<int64_t> shape(inputType.getShape());
  shape[dim] *= *groupSize;
  return verifyResultType(*this, inputType.clone(shape), getResult().getType(),
                          ("dimension " + Twine(dim) +
                           " gathered over a group of " + Twine(*groupSize))
                              .str());
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> groupSize = verifyGroup(*this, getMeshAttr(), getAxes());
  if (failed(groupSize))
    return failure();
  auto inputType = llvm::cast<RankedTensorType>(getInput().getType());
  int64_t dim = getDim();
  if (failed(verifyDimInRange(*this, "dim", dim, inputType)) ||
      failed(verifyDivisible(*this, dim, inputType, *groupSize, getAxes())))
    return failure();
  SmallVector<int64_t> shape(inputType.getShape());
  shape[dim] /= *groupSize;
  return verifyResultType(*this, inputType.clone(shape), getResult().getType(),
                          ("dimension " + Twine(dim) +
                           " scattered over a group of " + Twine(*groupSize))
                              .str());
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> groupSize = verifyGroup(*this, getMeshAttr(), getAxes());
  if (failed(groupSize))
    return failure();
  auto inputType = llvm::cast<RankedTensorType>(getInput().getType());
  int64_t splitDim = getSplitDim(), concatDim = getConcatDim();
  if (failed(verifyDimInRange(*this, "split dim", splitDim, inputType)) ||
      failed(verifyDimInRange(*this, "concat dim", concatDim, inputType)) ||
      failed(
          verifyDivisible(*this, splitDim, inputType, *groupSize, getAxes())))
    return failure();
  SmallVector<int64_t> shape(inputType.getShape());
  shape[splitDim] /= *groupSize;
  shape[concatDim] *= *groupSize;
  return verifyResultType(*this, inputType.clone(shape), getResult().getType(),
                          ("dimension " + Twine(splitDim) +
                           " split and dimension " + Twine(concatDim) +
                           " concatenated over a group of " + Twine(*groupSize))
                              .str());
}

LogicalResult SliceShardOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> groupSize = verifyGroup(*this, getMeshAttr(), getAxes());
  if (failed(groupSize))
    return failure();
  auto inputType = llvm::cast<RankedTensorType>(getInput().getType());
  int64_t dim = getDim();
  if (failed(verifyDimInRange(*this, "dim", dim, inputType)) ||
      failed(verifyDivisible(*this, dim, inputType, *groupSize, getAxes())))
    return failure();
  SmallVector<int64_t> shape(inputType.getShape());
  shape[dim] /= *groupSize;
  return verifyResultType(
      *this, inputType.clone(shape), getResult().getType(),
      ("dimension " + Twine(dim) + " cut into " + Twine(*groupSize) + " pieces")
          .str());
}

LogicalResult BroadcastOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> groupSize = verifyGroup(*this, getMeshAttr(), getAxes());
  if (failed(groupSize))
    return failure();
  return verifyPositionInGroup(*this, "root", getRoot(), *groupSize);
}

LogicalResult CollectivePermuteOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyGroup(*this, getMeshAttr(), getAxes());
}

namespace {
LogicalResult verifyPointToPoint(Operation *op, FlatSymbolRefAttr meshName,
                                 ArrayAttr axes, int64_t peer,
                                 int64_t channel) {
  FailureOr<int64_t> groupSize = verifyGroup(op, meshName, axes);
  if (failed(groupSize))
    return failure();
  if (failed(verifyPositionInGroup(op, "peer", peer, *groupSize)))
    return failure();
  if (channel < 0)
    return op->emitOpError() << "expected a channel >= 0, found " << channel;
  return success();
}
} // namespace

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyPointToPoint(*this, getMeshAttr(), getAxes(), getPeer(),
                            getChannel());
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyPointToPoint(*this, getMeshAttr(), getAxes(), getPeer(),
                            getChannel());
}
