//===- TrellisOps.cpp - Operations of the trellis dialect -----------------===//

#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "trellis/Common/OpContract.h"
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

/// The op's attribute `name` as the op table's rows read it: integers,
/// the mesh axes, and the reduction kind's keyword.
std::optional<AttrValue> contractAttr(Operation *op, StringRef name) {
  Attribute attr = op->getAttr(name);
  AttrValue value;
  if (auto axes = llvm::dyn_cast_or_null<ArrayAttr>(attr)) {
    value.kind = AttrKind::Strings;
    for (Attribute axis : axes)
      value.texts.push_back(llvm::cast<StringAttr>(axis).getValue().str());
    return value;
  }
  if (auto integer = llvm::dyn_cast_or_null<IntegerAttr>(attr)) {
    value.kind = AttrKind::Int;
    value.integer = integer.getInt();
    return value;
  }
  if (auto kind = llvm::dyn_cast_or_null<ReductionKindAttr>(attr)) {
    value.kind = AttrKind::String;
    value.text = stringifyReductionKind(kind.getValue()).str();
    return value;
  }
  return std::nullopt;
}

/// Checks a collective by its row of the op table (OpContract.h), as the
/// plan's loader checks the plan's instruction: its attributes, and the
/// result types its shape rule gives for the operands and a group of
/// `groupSize` ranks over `axes`.
LogicalResult verifyByContract(Operation *op, int64_t groupSize,
                               ArrayAttr axes) {
  // Every collective has its row (TrellisContractTest).
  const OpContract *contract =
      findOpContract(op->getName().stripDialect().str());
  assert(contract && "a trellis collective without an op table row");
  std::vector<trellis::TensorType> inputs;
  for (Value operand : op->getOperands()) {
    auto type = llvm::cast<RankedTensorType>(operand.getType());
    Type element = type.getElementType();
    std::optional<ElementType> kind =
        element.isF32()         ? std::optional(ElementType::F32)
        : element.isBF16()      ? std::optional(ElementType::BF16)
        : element.isF16()       ? std::optional(ElementType::F16)
        : element.isInteger(32) ? std::optional(ElementType::I32)
                                : std::nullopt;
    if (!kind)
      return op->emitOpError()
             << "expected an operand of f32, bf16, f16 or i32, found " << type;
    inputs.push_back(
        {std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
         *kind});
  }
  AttrMap attrs;
  for (const AttrSpec &spec : contract->attrs)
    if (std::optional<AttrValue> value = contractAttr(op, spec.name))
      attrs[spec.name] = std::move(*value);
  std::vector<trellis::TensorType> results;
  if (trellis::Diagnostic diagnostic = inferResults(
          *contract, OpInstance(inputs, attrs, groupSize, axes.size()),
          results))
    return op->emitOpError()
           << *diagnostic << " (the group of mesh axes " << axes << ")";
  // A receive's result is the buffer its send reads: its rule gives none
  // (and a send has none).
  if (results.empty())
    return success();
  for (auto [result, expected] : llvm::zip_equal(op->getResults(), results)) {
    auto found = llvm::cast<RankedTensorType>(result.getType());
    MLIRContext *context = op->getContext();
    Type element;
    switch (expected.element) {
    case ElementType::F32:
      element = Float32Type::get(context);
      break;
    case ElementType::BF16:
      element = BFloat16Type::get(context);
      break;
    case ElementType::F16:
      element = Float16Type::get(context);
      break;
    case ElementType::I32:
      element = IntegerType::get(context, 32);
      break;
    }
    auto wanted = RankedTensorType::get(expected.shape, element);
    if (found == wanted)
      continue;
    return op->emitOpError()
           << "expected result type " << wanted << " (the op table's "
           << contract->name << " over a group of " << groupSize << "), found "
           << found;
  }
  return success();
}

/// The group's checks (verifyGroup), then the op table's.
LogicalResult verifyCollective(Operation *op, FlatSymbolRefAttr meshName,
                               ArrayAttr axes) {
  FailureOr<int64_t> groupSize = verifyGroup(op, meshName, axes);
  if (failed(groupSize))
    return failure();
  return verifyByContract(op, *groupSize, axes);
}

} // namespace

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult SliceShardOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult BroadcastOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult CollectivePermuteOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &) {
  return verifyCollective(*this, getMeshAttr(), getAxes());
}
