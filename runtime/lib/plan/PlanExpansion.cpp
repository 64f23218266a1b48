//===- PlanExpansion.cpp - Schedules expanded into programs ---------------===//

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

Status PlanReader::expandStage(int64_t index) {
  StageProgram &out = plan_.stages[index];
  int64_t m = plan_.microBatches;
  std::set<int64_t> accumulated;
  std::vector<int64_t> first(m, -1), last(m, -1);
  bool chunked = false;
  for (const ActionProgramDesc &program : programs_[index])
    chunked |= program.chunk > 0;
  for (size_t position = 0; position < schedules_[index].size(); ++position) {
    // (Not a structured binding: lambdas below capture the micro-batch.)
    int64_t p = schedules_[index][position].first;
    int64_t mb = schedules_[index][position].second;
    const ActionProgramDesc &program = programs_[index][p];
    if (mb >= 0) {
      if (first[mb] < 0)
        first[mb] = static_cast<int64_t>(position);
      last[mb] = static_cast<int64_t>(position);
    }
    int64_t begin = static_cast<int64_t>(out.program.size());
    for (size_t i = 0; i < program.body.program.size(); ++i) {
      Instruction instruction = program.body.program[i];
      for (int64_t &id : instruction.inputs)
        id = bufferFor(id, mb);
      for (int64_t &id : instruction.outputs)
        id = bufferFor(id, mb);
      if (isPointToPoint(instruction.op)) {
        auto channel = [&](int64_t plan) {
          return program.perMicroBatch() ? plan * m + mb : channels_ * m + plan;
        };
        instruction.attrs["channel"].integer =
            channel(instruction.integer("channel"));
        if (instruction.attrs.count("complete_with"))
          instruction.attrs["complete_with"].integer =
              channel(instruction.integer("complete_with"));
      }
      if (accumulates(instruction)) {
        AttrValue firstAdd;
        firstAdd.kind = AttrValue::Kind::Bool;
        firstAdd.flag = accumulated.insert(instruction.outputs[0]).second;
        instruction.attrs["first"] = firstAdd;
      }
      out.program.push_back(std::move(instruction));
      out.instructionAxes.push_back(program.body.instructionAxes[i]);
    }
    // A lone step program needs no action to name it.
    int64_t count = static_cast<int64_t>(out.program.size()) - begin;
    if (count > 0 && schedules_[index].size() > 1) {
      std::string name = actionName(program, mb, chunked);
      out.actions.push_back({name, begin, count});
    }
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
