//===- VerifyPipeline.cpp - Stage functions proven runnable together ------===//

#include "trellis/Pipeline/Passes.h"

#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Pipeline/PipelineSplit.h"

namespace trellis {
#define GEN_PASS_DEF_VERIFYPIPELINEPASS
#include "trellis/Pipeline/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct VerifyPipelinePass
    : public trellis::impl::VerifyPipelinePassBase<VerifyPipelinePass> {
  using VerifyPipelinePassBase::VerifyPipelinePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<SmallVector<func::FuncOp>> stages =
        findStageFunctions(module, functionName);
    if (failed(stages))
      return signalPassFailure();
    for (func::FuncOp stage : *stages)
      if (!stage->hasAttr(TrellisDialect::kScheduleAttrName)) {
        stage.emitError("expected the stage's schedule (trellis.schedule): "
                        "run trellis-schedule-pipeline first");
        return signalPassFailure();
      }
    FailureOr<PipelineProgram> program =
        readStagePrograms(module, functionName);
    if (failed(program) ||
        failed(verifyPipelineProgram(stages->front(), *program)))
      return signalPassFailure();
  }
};

} // namespace
