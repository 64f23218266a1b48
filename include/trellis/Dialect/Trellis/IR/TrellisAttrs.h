//===- TrellisAttrs.h - Attributes of the trellis dialect -------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_H
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Dialect/Trellis/IR/TrellisEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "trellis/Dialect/Trellis/IR/TrellisAttrs.h.inc"

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_H
