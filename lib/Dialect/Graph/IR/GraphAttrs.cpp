//===- GraphAttrs.cpp - Model parts and the graph dialect's op attributes -===//

#include "trellis/Dialect/Graph/IR/GraphAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace trellis::graph;

#define GET_ATTRDEF_CLASSES
#include "trellis/Dialect/Graph/IR/GraphAttrs.cpp.inc"

void GraphDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "trellis/Dialect/Graph/IR/GraphAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// PartAttr
//===----------------------------------------------------------------------===//

Attribute PartAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<PartKind> kind = symbolizePartKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "expected a model part (embedding, layer N or "
                             "head), found '"
                          << keyword << "'";
    return {};
  }
  int64_t layer = 0;
  if (*kind == PartKind::Layer && parser.parseInteger(layer))
    return {};
  if (parser.parseGreater())
    return {};
  return parser.getChecked<PartAttr>(loc, parser.getContext(), *kind, layer);
}

void PartAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyPartKind(getKind());
  if (isLayer())
    printer << " " << getLayer();
  printer << ">";
}

LogicalResult PartAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               PartKind kind, int64_t layer) {
  if (kind == PartKind::Layer && layer < 0)
    return emitError() << "expected a layer index >= 0, found " << layer;
  if (kind != PartKind::Layer && layer != 0)
    return emitError() << "expected no layer index on the "
                       << stringifyPartKind(kind) << ", found " << layer;
  return success();
}

int64_t PartAttr::getOrder() const {
  switch (getKind()) {
  case PartKind::Embedding:
    return 0;
  case PartKind::Layer:
    return getLayer() + 1;
  case PartKind::Head:
    return std::numeric_limits<int64_t>::max();
  }
  llvm_unreachable("unknown part kind");
}

std::string PartAttr::str() const {
  if (isLayer())
    return "layer " + std::to_string(getLayer());
  return stringifyPartKind(getKind()).str();
}

PartAttr trellis::graph::getModelPart(Operation *op) {
  return op->getAttrOfType<PartAttr>(GraphDialect::kPartAttrName);
}

ResultArgument trellis::graph::getResultArgument(Operation *step,
                                                 unsigned index) {
  auto function = llvm::cast<FunctionOpInterface>(step);
  ResultArgument result;
  if (auto updates = function.getResultAttrOfType<IntegerAttr>(
          index, GraphDialect::kUpdatesAttrName)) {
    result.argument = updates.getInt();
    result.updates = true;
  } else if (auto gradientOf = function.getResultAttrOfType<IntegerAttr>(
                 index, "graph.gradient_of")) {
    result.argument = gradientOf.getInt();
  }
  return result;
}

void trellis::graph::setModelPart(Operation *op, PartAttr part) {
  if (part)
    op->setAttr(GraphDialect::kPartAttrName, part);
  else
    op->removeAttr(GraphDialect::kPartAttrName);
}

void trellis::graph::copyPlacement(Operation *from, Operation *to) {
  if (Attribute phase = from->getAttr(GraphDialect::kPhaseAttrName))
    to->setAttr(GraphDialect::kPhaseAttrName, phase);
  if (PartAttr part = getModelPart(from))
    setModelPart(to, part);
}

//===----------------------------------------------------------------------===//
// Op attributes of the dialect
//===----------------------------------------------------------------------===//

// Verifies graph.part (a #graph.part), graph.micro_batches (an integer >= 1)
// and graph.phase ("forward", "backward" or "weight") on any op.
LogicalResult GraphDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kPartAttrName) {
    if (!llvm::isa<PartAttr>(attr.getValue()))
      return op->emitOpError()
             << "expected '" << kPartAttrName
             << "' to be a #graph.part, found " << attr.getValue();
    return success();
  }
  if (name == kMicroBatchesAttrName) {
    auto count = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    if (!count || count.getValue().slt(1))
      return op->emitOpError()
             << "expected '" << kMicroBatchesAttrName
             << "' to be an integer >= 1, found " << attr.getValue();
    return success();
  }
  if (name == kReduceFirstAttrName) {
    if (!llvm::isa<CastOp>(op) || !llvm::isa<UnitAttr>(attr.getValue()))
      return op->emitOpError()
             << "expected '" << kReduceFirstAttrName
             << "' to be a unit attribute of a graph.cast";
    return success();
  }
  if (name == kPrecisionAttrName) {
    auto precision = llvm::dyn_cast<StringAttr>(attr.getValue());
    auto policy = llvm::dyn_cast<PrecisionOpInterface>(op);
    if (!precision || precision.getValue() != "f32" || !policy ||
        policy.getPrecisionPolicy() != PrecisionPolicy::Low)
      return op->emitOpError()
             << "expected '" << kPrecisionAttrName
             << "' to be \"f32\" on an op that computes in the compute "
                "dtype, found "
             << attr.getValue();
    return success();
  }
  if (name == kPhaseAttrName) {
    auto phase = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!phase || !llvm::is_contained(
                          ArrayRef<StringRef>{"forward", "backward", "weight"},
                          phase.getValue()))
      return op->emitOpError()
             << "expected '" << kPhaseAttrName
             << "' to be \"forward\", \"backward\" or \"weight\", found "
             << attr.getValue();
    return success();
  }
  return success();
}
