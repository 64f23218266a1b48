//===- TrellisAttrs.cpp - Attributes of the trellis dialect ---------------===//

#include "trellis/Dialect/Trellis/IR/TrellisAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace trellis;

#include "trellis/Dialect/Trellis/IR/TrellisEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "trellis/Dialect/Trellis/IR/TrellisAttrs.cpp.inc"

void TrellisDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "trellis/Dialect/Trellis/IR/TrellisAttrs.cpp.inc"
      >();
}

namespace {

/// Prints `"a", "b"` for a list of axis names.
void printAxisList(AsmPrinter &printer, ArrayRef<StringAttr> axes) {
  llvm::interleaveComma(axes, printer, [&](StringAttr axis) {
    printer.printString(axis.getValue());
  });
}

/// Parses `{"a", "b"}` (possibly empty) into `axes`.
ParseResult parseAxisSet(AsmParser &parser, SmallVectorImpl<StringAttr> &axes) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Braces, [&]() -> ParseResult {
        std::string name;
        if (parser.parseString(&name))
          return failure();
        axes.push_back(StringAttr::get(parser.getContext(), name));
        return success();
      });
}

/// `"tp"` or `"tp", "sp"` with quotes, for diagnostics.
std::string quoteAxes(ArrayRef<StringAttr> axes) {
  std::string text;
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (i)
      text += ", ";
    text += "\"" + axis.getValue().str() + "\"";
  }
  return text;
}

} // namespace

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

namespace {

/// Parses `"name"=size` or `"name":role=size`.
FailureOr<MeshAxisAttr> parseMeshAxis(AsmParser &parser) {
  std::string name;
  int64_t size = 0;
  if (parser.parseString(&name))
    return failure();
  trellis::AxisRole role = trellis::impliedAxisRole(name);
  if (succeeded(parser.parseOptionalColon())) {
    SMLoc roleLoc = parser.getCurrentLocation();
    StringRef roleName;
    if (parser.parseKeyword(&roleName))
      return failure();
    std::optional<trellis::AxisRole> parsed =
        trellis::parseAxisRole(std::string_view(roleName));
    if (!parsed)
      return parser.emitError(roleLoc)
             << "expected a role for mesh axis \"" << name
             << "\" (data, tensor, pipeline, context or expert), found '"
             << roleName << "'";
    role = *parsed;
  }
  if (parser.parseEqual() || parser.parseInteger(size))
    return failure();
  return MeshAxisAttr::get(parser.getContext(), name, size, role);
}

/// Prints `"name"=size`, the role after a colon where the name does not
/// imply it.
void printMeshAxis(AsmPrinter &printer, MeshAxisAttr axis) {
  printer.printString(axis.getName());
  if (axis.getRole() != trellis::impliedAxisRole(axis.getName()))
    printer << ":" << trellis::axisRoleName(axis.getRole());
  printer << "=" << axis.getSize();
}

std::vector<trellis::MeshAxis> toMeshAxes(ArrayRef<MeshAxisAttr> axes) {
  std::vector<trellis::MeshAxis> meshAxes;
  for (MeshAxisAttr axis : axes)
    meshAxes.push_back({axis.getName().str(), axis.getSize(), axis.getRole()});
  return meshAxes;
}

} // namespace

Attribute MeshAxisAttr::parse(AsmParser &parser, Type) {
  FailureOr<MeshAxisAttr> axis;
  if (parser.parseLess() || failed(axis = parseMeshAxis(parser)) ||
      parser.parseGreater())
    return {};
  return *axis;
}

void MeshAxisAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printMeshAxis(printer, *this);
  printer << ">";
}

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<MeshAxisAttr> axes;
  auto parseAxis = [&]() -> ParseResult {
    FailureOr<MeshAxisAttr> axis = parseMeshAxis(parser);
    if (failed(axis))
      return failure();
    axes.push_back(*axis);
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseAxis) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(loc, parser.getContext(), axes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getAxes(), printer, [&](MeshAxisAttr axis) {
    printMeshAxis(printer, axis);
  });
  printer << "]>";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes) {
  trellis::MeshError error;
  if (!trellis::Mesh::create(toMeshAxes(axes), &error))
    return emitError() << error.message;
  return success();
}

trellis::Mesh MeshAttr::getMesh() const {
  return *trellis::Mesh::create(toMeshAxes(getAxes()), nullptr);
}

std::optional<size_t> MeshAttr::getAxisIndex(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(getAxes()))
    if (axis.getName() == name)
      return i;
  return std::nullopt;
}

int64_t MeshAttr::getAxisSize(StringRef name) const {
  std::optional<size_t> index = getAxisIndex(name);
  return index ? getAxes()[*index].getSize() : 1;
}

SmallVector<StringAttr>
MeshAttr::getAxesWithRole(trellis::AxisRole role) const {
  SmallVector<StringAttr> names;
  for (MeshAxisAttr axis : getAxes())
    if (axis.getRole() == role)
      names.push_back(StringAttr::get(getContext(), axis.getName()));
  return names;
}

SmallVector<StringAttr> MeshAttr::getBatchAxes() const {
  SmallVector<StringAttr> names;
  for (MeshAxisAttr axis : getAxes())
    if (trellis::splitsBatch(axis.getRole()))
      names.push_back(StringAttr::get(getContext(), axis.getName()));
  return names;
}

int64_t MeshAttr::getGroupSize(ArrayRef<StringAttr> axes) const {
  int64_t ranks = 1;
  for (StringAttr axis : axes)
    ranks *= getAxisSize(axis.getValue());
  return ranks;
}

int64_t MeshAttr::getNumRanks() const {
  int64_t ranks = 1;
  for (MeshAxisAttr axis : getAxes())
    ranks *= axis.getSize();
  return ranks;
}

//===----------------------------------------------------------------------===//
// DimShardingAttr
//===----------------------------------------------------------------------===//

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> axes;
  bool isOpen = false;
  if (parser.parseLBrace())
    return {};
  if (succeeded(parser.parseOptionalRBrace()))
    return DimShardingAttr::get(parser.getContext(), axes, isOpen);
  while (true) {
    if (succeeded(parser.parseOptionalQuestion())) {
      isOpen = true;
      if (parser.parseRBrace())
        return {};
      break;
    }
    std::string name;
    if (parser.parseString(&name))
      return {};
    axes.push_back(StringAttr::get(parser.getContext(), name));
    if (succeeded(parser.parseOptionalRBrace()))
      break;
    if (parser.parseComma())
      return {};
  }
  return DimShardingAttr::get(parser.getContext(), axes, isOpen);
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "{";
  printAxisList(printer, getAxes());
  if (getIsOpen())
    printer << (getAxes().empty() ? "?" : ", ?");
  printer << "}";
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  MLIRContext *context = parser.getContext();
  FlatSymbolRefAttr meshName;
  SmallVector<DimShardingAttr> dims;
  SmallVector<StringAttr> partialAxes;
  ReductionKind kind = ReductionKind::Sum;
  auto parseDim = [&]() -> ParseResult {
    auto dim = llvm::dyn_cast_if_present<DimShardingAttr>(
        DimShardingAttr::parse(parser, Type()));
    if (!dim)
      return failure();
    dims.push_back(dim);
    return success();
  };
  if (parser.parseLess() || parser.parseAttribute(meshName) ||
      parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    StringRef kindName;
    SMLoc kindLoc;
    if (parser.parseKeyword("partial") || parser.parseLess() ||
        (kindLoc = parser.getCurrentLocation(), parser.parseKeyword(&kindName)))
      return {};
    std::optional<ReductionKind> parsedKind = symbolizeReductionKind(kindName);
    if (!parsedKind) {
      parser.emitError(kindLoc)
          << "expected a reduction kind (sum, max, min), found '" << kindName
          << "'";
      return {};
    }
    kind = *parsedKind;
    if (parser.parseGreater() || parser.parseEqual() ||
        parseAxisSet(parser, partialAxes))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(loc, context, meshName, dims,
                                         partialAxes, kind);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getMeshName() << ", [";
  llvm::interleaveComma(getDims(), printer,
                        [&](DimShardingAttr dim) { dim.print(printer); });
  printer << "]";
  if (!getPartialAxes().empty()) {
    printer << ", partial<" << stringifyReductionKind(getPartialKind())
            << ">={";
    printAxisList(printer, getPartialAxes());
    printer << "}";
  }
  printer << ">";
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr meshName,
                                   ArrayRef<DimShardingAttr> dims,
                                   ArrayRef<StringAttr> partialAxes,
                                   ReductionKind) {
  if (!meshName)
    return emitError() << "expected a mesh symbol";
  // Where each axis was first seen: a dimension index, or -1 for partial.
  llvm::StringMap<int64_t> firstUse;
  for (auto [dimIndex, dim] : llvm::enumerate(dims)) {
    for (StringAttr axis : dim.getAxes()) {
      auto [it, inserted] = firstUse.try_emplace(axis.getValue(), dimIndex);
      if (!inserted)
        return emitError() << "mesh axis \"" << axis.getValue()
                           << "\" is used twice: it splits dimension "
                           << it->second << " and dimension " << dimIndex;
    }
  }
  for (StringAttr axis : partialAxes) {
    auto [it, inserted] = firstUse.try_emplace(axis.getValue(), -1);
    if (inserted)
      continue;
    if (it->second < 0)
      return emitError() << "mesh axis \"" << axis.getValue()
                         << "\" is listed twice as partial";
    return emitError() << "mesh axis \"" << axis.getValue()
                       << "\" is both splitting dimension " << it->second
                       << " and partial";
  }
  return success();
}

bool ShardingAttr::isFullyReplicated() const {
  return getPartialAxes().empty() &&
         llvm::all_of(getDims(), [](DimShardingAttr dim) {
           return dim.getAxes().empty();
         });
}

bool ShardingAttr::usesAxis(StringRef axis) const {
  auto matches = [&](StringAttr name) { return name.getValue() == axis; };
  return llvm::any_of(getPartialAxes(), matches) ||
         llvm::any_of(getDims(), [&](DimShardingAttr dim) {
           return llvm::any_of(dim.getAxes(), matches);
         });
}

LogicalResult
ShardingAttr::verifyForType(function_ref<InFlightDiagnostic()> emitError,
                            MeshAttr mesh, Type type, bool typeIsLocal,
                            bool allowPadding) const {
  auto tensorType = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return emitError() << "expected a ranked tensor to carry a sharding, found "
                       << type;
  if (static_cast<int64_t>(getDims().size()) != tensorType.getRank())
    return emitError() << "sharding has " << getDims().size()
                       << " dimensions but the tensor " << type << " has rank "
                       << tensorType.getRank();
  auto checkKnown = [&](StringAttr axis) -> LogicalResult {
    if (mesh.getAxisIndex(axis.getValue()))
      return success();
    std::string known;
    for (auto [i, meshAxis] : llvm::enumerate(mesh.getAxes()))
      known += (i ? ", \"" : "\"") + meshAxis.getName().str() + "\"";
    return emitError() << "unknown mesh axis \"" << axis.getValue()
                       << "\" in mesh " << getMeshName() << " (axes: " << known
                       << ")";
  };
  for (StringAttr axis : getPartialAxes())
    if (failed(checkKnown(axis)))
      return failure();
  for (auto [dimIndex, dim] : llvm::enumerate(getDims())) {
    int64_t divisor = 1;
    for (StringAttr axis : dim.getAxes()) {
      if (failed(checkKnown(axis)))
        return failure();
      divisor *= mesh.getAxes()[*mesh.getAxisIndex(axis.getValue())].getSize();
    }
    if (dim.getAxes().empty() || typeIsLocal)
      continue;
    if (allowPadding && dim.getAxes().size() == 1)
      continue; // the last pieces are padded
    int64_t size = tensorType.getDimSize(dimIndex);
    if (ShapedType::isDynamic(size))
      return emitError() << "dimension " << dimIndex
                         << " is dynamic but split over mesh axes "
                         << quoteAxes(dim.getAxes())
                         << ": expected a static size";
    if (size % divisor != 0) {
      InFlightDiagnostic diag = emitError();
      diag << "dimension " << dimIndex << " of size " << size
           << " is not divisible by mesh ";
      if (dim.getAxes().size() == 1)
        diag << "axis " << quoteAxes(dim.getAxes()) << " of size " << divisor;
      else
        diag << "axes " << quoteAxes(dim.getAxes()) << " of total size "
             << divisor;
      return diag;
    }
  }
  return success();
}

SmallVector<int64_t>
ShardingAttr::getLocalShape(MeshAttr mesh,
                            ArrayRef<int64_t> globalShape) const {
  SmallVector<int64_t> shape(globalShape);
  for (auto [dimIndex, dim] : llvm::enumerate(getDims())) {
    int64_t pieces = 1;
    for (StringAttr axis : dim.getAxes())
      pieces *= mesh.getAxes()[*mesh.getAxisIndex(axis.getValue())].getSize();
    shape[dimIndex] = (shape[dimIndex] + pieces - 1) / pieces;
  }
  return shape;
}
