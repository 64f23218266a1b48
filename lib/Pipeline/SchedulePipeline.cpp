//===- SchedulePipeline.cpp - Each stage's programs in schedule order -----===//
//
// schedulePipeline (PipelineSplit.h) orders each rank's programs by the
// step's schedule; the pass writes that order on the stage functions.
//
//===----------------------------------------------------------------------===//

#include "trellis/Pipeline/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Common/PipelineSchedule.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Pipeline/PipelineSplit.h"

#include <set>

namespace trellis {
#define GEN_PASS_DEF_SCHEDULEPIPELINEPASS
#include "trellis/Pipeline/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// Orders each rank's programs by `schedule`'s streams.
LogicalResult buildSchedules(Operation *anchor, PipelineProgram &program_,
                             const PipelineStreams &schedule) {
  int64_t ranks_ = program_.ranks();
  program_.schedule.assign(ranks_, {});
  for (int64_t rank = 0; rank < ranks_; ++rank) {
    std::vector<ScheduledAction> &entries = program_.schedule[rank];
    std::set<std::pair<int64_t, int64_t>> scheduled; // (program, micro-batch)
    auto add = [&](int64_t program, int64_t microBatch) {
      if (program >= 0 && scheduled.insert({program, microBatch}).second)
        entries.push_back({program, microBatch});
    };
    for (const PipelineAction &action : schedule[rank]) {
      using Kind = PipelineAction::Kind;
      switch (action.kind) {
      case Kind::RecvActivation:
        add(program_.findProgram(rank, ActionKind::Forward, action.chunk, true),
            action.microBatch);
        break;
      case Kind::RecvGradient:
        add(program_.findProgram(rank, ActionKind::Backward, action.chunk,
                                 true),
            action.microBatch);
        break;
      case Kind::Forward:
      case Kind::Backward:
      case Kind::WeightGradient: {
        ActionKind kind = action.kind == Kind::Forward    ? ActionKind::Forward
                          : action.kind == Kind::Backward ? ActionKind::Backward
                                                          : ActionKind::Weight;
        add(program_.findProgram(rank, kind, action.chunk, true),
            action.microBatch);
        add(program_.findProgram(rank, kind, action.chunk, false),
            action.microBatch);
        break;
      }
      case Kind::SendActivation:
      case Kind::SendGradient:
        break; // Sent at the end of the action that made the values.
      }
    }
    add(program_.findProgram(rank, ActionKind::Step, 0, false), -1);
    // Every program of a micro-batch must run for each of them.
    std::vector<int64_t> runs(program_.programs[rank].size(), 0);
    for (const ScheduledAction &entry : entries)
      ++runs[entry.program];
    for (auto [index, program] : llvm::enumerate(program_.programs[rank])) {
      int64_t expected =
          program.kind == ActionKind::Step ? 1 : program_.microBatches;
      if (runs[index] == expected)
        continue;
      auto op = llvm::find_if(program.items, [](const StageItem &item) {
        return item.kind == StageItem::Kind::Op;
      });
      InFlightDiagnostic diag = op != program.items.end()
                                    ? op->op->emitOpError()
                                    : anchor->emitError();
      return diag << "belongs to the " << program.name()
                  << " program of pipeline rank " << rank << ", which the "
                  << scheduleKindName(program_.kind) << " schedule runs "
                  << runs[index] << " times: expected " << expected;
    }
  }
  return success();
}

} // namespace

LogicalResult trellis::schedulePipeline(Operation *anchor,
                                        PipelineProgram &program) {
  PipelineShape shape{program.ranks(), program.microBatches, program.chunks};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(program.kind, shape, &error);
  if (!streams)
    return anchor->emitError() << "pipeline schedule: " << error;
  if (!simulateSchedule(*streams, shape, PipelineCosts(), &error))
    return anchor->emitError() << "pipeline schedule: " << error;
  return buildSchedules(anchor, program, *streams);
}

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
    if (failed(program) || failed(schedulePipeline(stages->front(), *program)))
      return signalPassFailure();
    Builder builder(&getContext());
    for (auto [rank, stage] : llvm::enumerate(*stages)) {
      SmallVector<Attribute> names;
      for (const ScheduledAction &entry : program->schedule[rank])
        names.push_back(builder.getStringAttr(
            program->programs[rank][entry.program].actionName(
                entry.microBatch, program->chunks)));
      stage->setAttr(TrellisDialect::kScheduleAttrName,
                     builder.getArrayAttr(names));
    }
  }
};

} // namespace
