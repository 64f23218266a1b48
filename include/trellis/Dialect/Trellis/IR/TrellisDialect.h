//===- TrellisDialect.h - The trellis dialect -------------------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_H
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_H

#include "mlir/IR/Dialect.h"

#include "trellis/Dialect/Trellis/IR/TrellisOpsDialect.h.inc"

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_H
