//===- SchedulePipeline.cpp - Each stage's programs in schedule order -----===//

#include "trellis/Pipeline/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Pipeline/PipelineSplit.h"

namespace trellis {
#define GEN_PASS_DEF_SCHEDULEPIPELINEPASS
#include "trellis/Pipeline/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct SchedulePipelinePass
    : public trellis::impl::SchedulePipelinePassBase<SchedulePipelinePass> {
  using SchedulePipelinePassBase::SchedulePipelinePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<SmallVector<func::FuncOp>> stages =
        findStageFunctions(module, functionName);
    FailureOr<PipelineProgram> program =
        succeeded(stages) ? readStagePrograms(module, functionName)
                          : FailureOr<PipelineProgram>(failure());
    if (failed(program) ||
        failed(schedulePipeline(stages->front(), *program)))
      return signalPassFailure();
    Builder builder(&getContext());
    // The channel each send completes with, by its own channel.
    llvm::DenseMap<int64_t, int64_t> completesWith;
    for (const StageTransfer &transfer : program->transfers)
      if (transfer.completedBy >= 0)
        completesWith[transfer.channel] =
            program->transfers[transfer.completedBy].channel;
    for (auto [rank, stage] : llvm::enumerate(*stages)) {
      SmallVector<Attribute> names;
      for (const ScheduledAction &entry : program->schedule[rank])
        names.push_back(builder.getStringAttr(
            program->programs[rank][entry.program].actionName(
                entry.microBatch, program->chunks)));
      stage->setAttr(TrellisDialect::kScheduleAttrName,
                     builder.getArrayAttr(names));
      stage.walk([&](SendOp send) {
        send->removeAttr(TrellisDialect::kCompleteWithAttrName);
        auto it = completesWith.find(send.getChannel());
        if (it != completesWith.end())
          send->setAttr(TrellisDialect::kCompleteWithAttrName,
                        builder.getI64IntegerAttr(it->second));
      });
    }
  }
};

} // namespace
