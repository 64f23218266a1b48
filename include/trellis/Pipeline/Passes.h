//===- Passes.h - Pipeline passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_PIPELINE_PASSES_H
#define TRELLIS_PIPELINE_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"

namespace trellis {

#define GEN_PASS_DECL
#include "trellis/Pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "trellis/Pipeline/Passes.h.inc"

} // namespace trellis

#endif // TRELLIS_PIPELINE_PASSES_H
