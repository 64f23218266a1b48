//===- Passes.h - Autodiff passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_AUTODIFF_PASSES_H
#define TRELLIS_AUTODIFF_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"

namespace trellis {

#define GEN_PASS_DECL
#include "trellis/Autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Autodiff/Passes.h.inc"

} // namespace trellis

#endif // TRELLIS_AUTODIFF_PASSES_H
