//===- PlanBinding.cpp - Scheduled actions bound to micro-batches ---------===//
//
// A stage keeps its action programs once. Each entry of its schedule runs
// one of them over the buffers of its micro-batch: micro-batch 0 the plan
// file's ids, micro-batch i >= 1 a copy of every buffer that holds one
// micro-batch's value (Plan::bindings). Only the attributes that differ
// between runs are written per run (ScheduledAction::amended).
//
//===----------------------------------------------------------------------===//

#include "PlanReader.h"

#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <set>

namespace trellis::runtime::planreader {

int64_t PlanReader::bufferFor(int64_t buffer, int64_t microBatch) {
  if (!perMicroBatch_[buffer] || microBatch <= 0)
    return buffer;
  auto [it, inserted] = copies_.try_emplace({buffer, microBatch}, 0);
  if (inserted) {
    it->second = static_cast<int64_t>(plan_.buffers.size());
    plan_.buffers.push_back(plan_.buffers[buffer]);
  }
  return it->second;
}

void PlanReader::expandInputs() {
  std::vector<Argument> arguments;
  // Results name arguments by their index in the plan file.
  std::vector<int64_t> newIndex;
  for (const Argument &argument : plan_.arguments) {
    newIndex.push_back(static_cast<int64_t>(arguments.size()));
    if (argument.role != ArgumentRole::Input || plan_.microBatches == 1) {
      arguments.push_back(argument);
      continue;
    }
    for (int64_t mb = 0; mb < plan_.microBatches; ++mb) {
      Argument copy = argument;
      copy.name += "." + std::to_string(mb);
      copy.buffer = bufferFor(argument.buffer, mb);
      arguments.push_back(std::move(copy));
    }
  }
  plan_.arguments = std::move(arguments);
  for (Result &result : plan_.results) {
    if (result.updates)
      result.updates = newIndex[*result.updates];
    if (result.gradientOf)
      result.gradientOf = newIndex[*result.gradientOf];
  }
}

void PlanReader::bindMicroBatches(size_t fileBuffers) {
  plan_.bindings.clear();
  if (plan_.microBatches == 1)
    return;
  plan_.bindings.resize(plan_.microBatches);
  for (std::vector<int64_t> &binding : plan_.bindings) {
    binding.resize(fileBuffers);
    for (size_t b = 0; b < fileBuffers; ++b)
      binding[b] = static_cast<int64_t>(b);
  }
  for (const auto &[key, copy] : copies_)
    plan_.bindings[key.second][key.first] = copy;
}

Status PlanReader::bindStage(int64_t index) {
  StageProgram &out = plan_.stages[index];
  int64_t m = plan_.microBatches;
  std::set<int64_t> accumulated;
  std::vector<int64_t> first(m, -1), last(m, -1);
  bool chunked = false;
  for (const ActionProgramDesc &program : programs_[index])
    chunked |= program.chunk > 0;
  for (const ActionProgramDesc &program : programs_[index])
    out.programs.push_back(program.body);
  out.evaluation = evaluations_[index];
  for (size_t position = 0; position < schedules_[index].size(); ++position) {
    auto [p, mb] = schedules_[index][position];
    const ActionProgramDesc &program = programs_[index][p];
    if (mb >= 0) {
      if (first[mb] < 0)
        first[mb] = static_cast<int64_t>(position);
      last[mb] = static_cast<int64_t>(position);
    }
    ScheduledAction action;
    action.program = p;
    action.microBatch = mb;
    action.name = actionName(program, mb, chunked);
    const std::vector<Instruction> &body = program.body.instructions;
    for (size_t i = 0; i < body.size(); ++i) {
      const Instruction &instruction = body[i];
      // Buffers in the order the plan file's ids are met, so that copies
      // are numbered the same whatever the binding's form.
      for (int64_t id : instruction.inputs)
        bufferFor(id, mb);
      for (int64_t id : instruction.outputs)
        bufferFor(id, mb);
      Instruction amended;
      bool amends = false;
      // Each micro-batch's transfers get channels of their own; the
      // step's come after all of theirs.
      if (isPointToPoint(instruction)) {
        auto channel = [&](int64_t plan) {
          return program.perMicroBatch() ? plan * m + mb : channels_ * m + plan;
        };
        amended = instruction;
        amends = true;
        amended.attrs["channel"].integer =
            channel(instruction.integer("channel"));
      }
      // The step's first add into a total writes it; later ones add.
      if (accumulates(instruction)) {
        bool firstAdd =
            accumulated.insert(bufferFor(instruction.outputs[0], mb)).second;
        if (firstAdd != instruction.flag("first")) {
          if (!amends)
            amended = instruction;
          amends = true;
          amended.attrs["first"] = AttrValue::ofBool(firstAdd);
        }
      }
      if (amends) {
        amended.resolve();
        action.amended.emplace_back(i, std::move(amended));
      }
    }
    out.schedule.push_back(std::move(action));
  }
  // Live micro-batches: the most whose first action has run and whose last
  // has not.
  std::vector<int64_t> change(schedules_[index].size() + 1, 0);
  for (int64_t mb = 0; mb < m; ++mb)
    if (first[mb] >= 0) {
      ++change[first[mb]];
      --change[last[mb] + 1];
    }
  int64_t live = 0;
  out.liveMicroBatches = 0;
  for (int64_t delta : change) {
    live += delta;
    out.liveMicroBatches = std::max(out.liveMicroBatches, live);
  }
  return Status::success();
}

} // namespace trellis::runtime::planreader
