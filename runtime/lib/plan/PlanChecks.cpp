//===- PlanChecks.cpp - Scopes, transfers and dataflow of a plan ----------===//

#include "PlanReader.h"

#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <set>

namespace trellis::runtime::planreader {

Status PlanReader::checkActionProgram(const ActionProgramDesc &program,
                                      const std::string &where) {
  for (size_t i = 0; i < program.body.instructions.size(); ++i) {
    const Instruction &instruction = program.body.instructions[i];
    std::string at = where + " instruction " + std::to_string(i) + " (" +
                     instruction.op + ")";
    if (!program.perMicroBatch()) {
      for (const std::vector<int64_t> *ids :
           {&instruction.inputs, &instruction.outputs})
        for (int64_t id : *ids)
          if (perMicroBatch_[id])
            return Status::error(at + ": buffer " + std::to_string(id) +
                                 " holds one micro-batch's value, but the "
                                 "step program runs once per step");
      if (accumulates(instruction))
        return Status::error(at + ": accumulate adds a micro-batch's value "
                                  "to the step's: expected it in a program "
                                  "of the micro-batch");
      continue;
    }
    if (!accumulates(instruction)) {
      for (int64_t id : instruction.outputs)
        if (!perMicroBatch_[id])
          return Status::error(at + ": writes buffer " + std::to_string(id) +
                               ", a value of the step, in a program that "
                               "runs once per micro-batch");
      continue;
    }
    // It adds a value of the micro-batch (an accumulate's input, a
    // matmul_accumulate's product of the micro-batch's operands) into one
    // of the step.
    bool readsMicroBatch = false;
    for (int64_t id : instruction.inputs)
      readsMicroBatch |= perMicroBatch_[id];
    if (!readsMicroBatch || perMicroBatch_[instruction.outputs[0]]) {
      std::string inputs;
      for (int64_t id : instruction.inputs)
        inputs += (inputs.empty() ? "" : ", ") + std::to_string(id);
      return Status::error(at +
                           ": expected a micro-batch's buffer in and a "
                           "step's buffer out, found buffers " +
                           inputs + " and " +
                           std::to_string(instruction.outputs[0]));
    }
  }
  return Status::success();
}

/// In each stage, every buffer is defined once (as an argument the stage
/// holds or an instruction output) before any instruction reads it.
Status PlanReader::checkDataflow(int64_t stage, bool evaluation) {
  plan_.stage = stage;
  std::string prefix =
      plan_.stages.size() > 1 ? "stage " + std::to_string(stage) + ": " : "";
  if (evaluation)
    prefix += "evaluation: ";
  std::vector<bool> runs = evaluationMask(plan_, stage);
  std::vector<bool> defined(plan_.buffers.size(), false);
  for (const Argument &argument : plan_.arguments) {
    if (!plan_.holds(argument.stages))
      continue;
    if (defined[argument.buffer])
      return Status::error("buffer " + std::to_string(argument.buffer) +
                           " is bound to two arguments");
    defined[argument.buffer] = true;
  }
  const StageProgram &stageProgram = plan_.stages[stage];
  std::vector<TimelineEntry> timeline = stageTimeline(plan_, stage);
  for (size_t i = 0; i < timeline.size(); ++i) {
    if (evaluation && !runs[i])
      continue;
    const TimelineEntry &entry = timeline[i];
    const Instruction &instruction = *entry.instruction;
    auto where = [&] {
      return prefix + "action " + stageProgram.schedule[entry.action].name +
             " instruction " + std::to_string(entry.index) + " (" +
             instruction.op + ")";
    };
    for (int64_t input : entry.inputs)
      if (!defined[input])
        return Status::error(where() + " reads buffer " +
                             std::to_string(input) + " before it is written");
    for (int64_t output : entry.outputs) {
      // Accumulators take every micro-batch's value.
      if (accumulates(instruction))
        continue;
      if (defined[output])
        return Status::error(where() + " writes buffer " +
                             std::to_string(output) +
                             ", which is already defined");
      defined[output] = true;
    }
    if (accumulates(instruction))
      defined[entry.outputs[0]] = true;
  }
  // An evaluation makes the loss alone.
  for (const Result &result : plan_.results)
    if (plan_.holds(result.stages) && !defined[result.buffer] &&
        (!evaluation || result.isLoss))
      return Status::error(prefix + "result buffer " +
                           std::to_string(result.buffer) + " is never written");
  return Status::success();
}

} // namespace trellis::runtime::planreader
