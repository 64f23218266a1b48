//===- PlanChecks.cpp - Scopes, transfers and dataflow of a plan ----------===//

#include "PlanReader.h"

#include "trellis/Common/OpContract.h"
#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <map>
#include <set>

namespace trellis::runtime::planreader {

namespace {

/// "f32 [4, 8]".
std::string describeBuffer(const BufferDesc &buffer) {
  return std::string(dtypeName(buffer.dtype)) + " " + formatShape(buffer.shape);
}

} // namespace

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

Status PlanReader::checkTransfers() {
  struct Transfer {
    int64_t stage, peer;
    const BufferDesc *buffer;
    std::string where;
  };
  // By channel: the send and the receive of each value.
  std::map<int64_t, Transfer> sends, receives;
  // By (sender, receiver): channels in the order each side issues them.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> sentOrder,
      receivedOrder;
  int64_t stageCount = static_cast<int64_t>(plan_.stages.size());
  for (int64_t stage = 0; stage < stageCount; ++stage) {
    const StageProgram &stageProgram = plan_.stages[stage];
    std::vector<TimelineEntry> timeline = stageTimeline(plan_, stage);
    for (size_t i = 0; i < timeline.size(); ++i) {
      const TimelineEntry &entry = timeline[i];
      const Instruction &instruction = *entry.instruction;
      if (!isPointToPoint(instruction))
        continue;
      bool sending = isSend(instruction);
      std::string where = "stage " + std::to_string(stage) + " action " +
                          stageProgram.schedule[entry.action].name +
                          " instruction " + std::to_string(entry.index) + " (" +
                          instruction.op + ")";
      if (!plan_.pipelineAxis || *entry.axes != AxisList{*plan_.pipelineAxis})
        return Status::error(
            where +
            ": transfers move values between pipeline stages: "
            "expected \"axes\" to be the pipeline axis alone" +
            (plan_.pipelineAxis
                 ? " ('" + plan_.mesh[*plan_.pipelineAxis].name + "')"
                 : std::string(", but the plan has one stage")));
      int64_t peer = instruction.integer("peer");
      int64_t channel = instruction.integer("channel");
      if (peer == stage)
        return Status::error(where + ": names its own stage " +
                             std::to_string(stage) + " as its peer");
      std::map<int64_t, Transfer> &byChannel = sending ? sends : receives;
      Transfer transfer{
          stage, peer,
          &plan_.buffers[sending ? entry.inputs[0] : entry.outputs[0]], where};
      auto [existing, inserted] = byChannel.emplace(channel, transfer);
      if (!inserted)
        return Status::error(where + ": channel " + std::to_string(channel) +
                             " is already " + (sending ? "sent" : "received") +
                             " by " + existing->second.where +
                             ": each value has a channel of its own");
      if (sending)
        sentOrder[{stage, peer}].push_back(channel);
      else
        receivedOrder[{peer, stage}].push_back(channel);
    }
  }
  for (const auto &[channel, send] : sends) {
    auto received = receives.find(channel);
    if (received == receives.end() || received->second.stage != send.peer ||
        received->second.peer != send.stage)
      return Status::error(
          send.where + ": sends channel " + std::to_string(channel) +
          " to stage " + std::to_string(send.peer) + ", which " +
          (received == receives.end()
               ? std::string("no stage receives")
               : "is received by " + received->second.where + " from stage " +
                     std::to_string(received->second.peer)));
    const BufferDesc &sent = *send.buffer, &into = *received->second.buffer;
    if (sent.shape != into.shape || sent.dtype != into.dtype)
      return Status::error(send.where + ": sends " + describeBuffer(sent) +
                           " on channel " + std::to_string(channel) + ", but " +
                           received->second.where + " receives it into " +
                           describeBuffer(into));
  }
  for (const auto &[channel, receive] : receives)
    if (!sends.count(channel))
      return Status::error(receive.where + ": receives channel " +
                           std::to_string(channel) + " from stage " +
                           std::to_string(receive.peer) +
                           ", which no stage sends");
  // Every send is received on its link: each link's two lists hold the
  // same channels.
  for (const auto &[link, sent] : sentOrder) {
    const std::vector<int64_t> &received = receivedOrder[link];
    auto [atSent, atReceived] =
        std::mismatch(sent.begin(), sent.end(), received.begin());
    if (atSent == sent.end())
      continue;
    return Status::error(
        "stage " + std::to_string(link.first) + " sends channel " +
        std::to_string(*atSent) + " to stage " + std::to_string(link.second) +
        " where stage " + std::to_string(link.second) + " receives channel " +
        std::to_string(*atReceived) +
        ": transfers between two stages are received in the order they are "
        "sent (NCCL matches them in order; a plan an older trellis compile "
        "wrote with --clip-grad may cross: compile it again)");
  }
  return Status::success();
}

} // namespace trellis::runtime::planreader
