//===- TrellisOps.h - Operations of the trellis dialect ---------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_H
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "trellis/Dialect/Trellis/IR/TrellisAttrs.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

#define GET_OP_CLASSES
#include "trellis/Dialect/Trellis/IR/TrellisOps.h.inc"

namespace trellis {

/// Finds the `trellis.mesh` called `meshName` visible from `from`, or emits
/// "unknown mesh" through `emitError` and returns null.
MeshOp lookupMesh(mlir::Operation *from, mlir::FlatSymbolRefAttr meshName,
                  llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// The ranks of each group of `collective` (an op with `mesh` and `axes`
/// attributes): the product of its axes' sizes; 1 if its mesh is unknown.
int64_t groupSizeOf(mlir::Operation *collective);

/// The product of the sizes of `axes` in `mesh` (1 for a null mesh).
int64_t meshAxesSize(MeshOp mesh, mlir::ArrayAttr axes);

} // namespace trellis

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_H
