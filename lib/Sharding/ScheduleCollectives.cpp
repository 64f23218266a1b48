//===- ScheduleCollectives.cpp - Collectives where GEMMs hide them --------===//

#include "trellis/Sharding/Passes.h"

#include "CollectiveSchedule.h"

#include "trellis/Analysis/StepReport.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"

namespace trellis {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVESPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;
using namespace trellis::sharding;

namespace {

/// How the rule sees `op`; `ids` numbers the values it reads and makes.
ScheduledOp describe(Operation *op, DenseMap<Value, int64_t> &ids) {
  auto id = [&](Value value) {
    return ids.try_emplace(value, static_cast<int64_t>(ids.size()))
        .first->second;
  };
  ScheduledOp scheduled;
  for (Value operand : op->getOperands())
    scheduled.reads.push_back(id(operand));
  for (Value result : op->getResults())
    scheduled.writes.push_back(id(result));
  auto phase =
      op->getAttrOfType<StringAttr>(graph::GraphDialect::kPhaseAttrName);
  scheduled.group = phaseGroup(phase ? phase.getValue() : "");
  const OpContract *contract = planContractOf(op);
  bool transfer =
      contract && (contract->name == "send" || contract->name == "recv");
  if (contract && contract->collective && !transfer)
    scheduled.kind = ScheduledOp::Kind::Collective;
  else if (!contract || transfer || kernelCommunicatesAt(op) ||
           op->getNumRegions() != 0)
    scheduled.kind = ScheduledOp::Kind::Fence;
  else
    scheduled.heavy = isComputeBound(graph::costFromContract(op));
  return scheduled;
}

struct ScheduleCollectivesPass
    : public trellis::impl::ScheduleCollectivesPassBase<
          ScheduleCollectivesPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    Block &body = function.getBody().front();
    SmallVector<Operation *> ops;
    std::vector<ScheduledOp> scheduled;
    DenseMap<Value, int64_t> ids;
    for (Operation &op : body.without_terminator()) {
      ops.push_back(&op);
      scheduled.push_back(describe(&op, ids));
    }
    std::vector<int64_t> order = scheduleCollectives(scheduled);
    // Each op in turn before the terminator: the block ends in the new
    // order.
    Operation *terminator = body.getTerminator();
    for (int64_t index : order)
      ops[index]->moveBefore(terminator);
  }
};

} // namespace
