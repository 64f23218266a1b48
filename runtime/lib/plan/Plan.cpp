//===- Plan.cpp - Plans: dtypes, instructions, stages ---------------------===//
//
// The loader is in plan/ (PlanReader.h).
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Plan.h"
#include "trellis/Runtime/OpShapes.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace trellis::runtime {

using json = nlohmann::json;

const char *dtypeName(DType dtype) { return elementTypeName(dtype); }

std::optional<DType> parseDType(const std::string &name) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32})
    if (name == dtypeName(dtype))
      return dtype;
  return std::nullopt;
}

int64_t dtypeBytes(DType dtype) {
  switch (dtype) {
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  }
  return 4;
}

int64_t BufferDesc::numElements() const {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

namespace {

const AttrValue *findAttr(const Instruction &instruction,
                          const std::string &name) {
  auto it = instruction.attrs.find(name);
  return it == instruction.attrs.end() ? nullptr : &it->second;
}

const std::vector<int64_t> kNoInts;
const std::vector<double> kNoReals;
const std::string kNoText;

} // namespace

void Instruction::resolve() {
  contract = findOpContract(op);
  parameters = contract ? std::make_shared<const OpParameters>(
                              decodeParameters(*contract, attrs))
                        : nullptr;
}

bool Instruction::flag(const std::string &name, bool fallback) const {
  const AttrValue *value = findAttr(*this, name);
  return value && value->kind == AttrValue::Kind::Bool ? value->flag : fallback;
}

int64_t Instruction::integer(const std::string &name, int64_t fallback) const {
  const AttrValue *value = findAttr(*this, name);
  return value && value->kind == AttrValue::Kind::Int ? value->integer
                                                      : fallback;
}

double Instruction::real(const std::string &name, double fallback) const {
  const AttrValue *value = findAttr(*this, name);
  if (!value)
    return fallback;
  if (value->kind == AttrValue::Kind::Real)
    return value->real;
  if (value->kind == AttrValue::Kind::Int)
    return static_cast<double>(value->integer);
  return fallback;
}

const std::vector<int64_t> &Instruction::ints(const std::string &name) const {
  const AttrValue *value = findAttr(*this, name);
  return value && value->kind == AttrValue::Kind::Ints ? value->ints : kNoInts;
}

const std::vector<double> &Instruction::reals(const std::string &name) const {
  const AttrValue *value = findAttr(*this, name);
  return value && (value->kind == AttrValue::Kind::Reals ||
                   value->kind == AttrValue::Kind::Ints)
             ? value->reals
             : kNoReals;
}

const std::string &Instruction::text(const std::string &name) const {
  const AttrValue *value = findAttr(*this, name);
  return value && value->kind == AttrValue::Kind::String ? value->text
                                                         : kNoText;
}

const std::vector<std::string> &
Instruction::texts(const std::string &name) const {
  static const std::vector<std::string> kNoTexts;
  const AttrValue *value = findAttr(*this, name);
  return value && value->kind == AttrValue::Kind::Strings ? value->texts
                                                          : kNoTexts;
}

Mesh planMesh(const Plan &plan) { return *Mesh::create(plan.mesh, nullptr); }

std::optional<InputName> parseInputName(const std::string &name) {
  for (const char *stream : {"tokens", "targets"}) {
    if (name == stream)
      return InputName{stream, -1};
    std::string prefix = std::string(stream) + ".";
    if (name.size() > prefix.size() && name.size() <= prefix.size() + 6 &&
        name.compare(0, prefix.size(), prefix) == 0 &&
        name.find_first_not_of("0123456789", prefix.size()) ==
            std::string::npos)
      return InputName{stream, std::stoll(name.substr(prefix.size()))};
  }
  return std::nullopt;
}

int64_t Plan::findArgument(ArgumentRole role, const std::string &name) const {
  for (size_t i = 0; i < arguments.size(); ++i)
    if (arguments[i].role == role && arguments[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

int64_t Plan::metadataInteger(const std::string &key, int64_t fallback) const {
  json metadata =
      json::parse(metadataJson, nullptr, /*allow_exceptions=*/false);
  if (!metadata.is_object() || !metadata.contains(key) ||
      !metadata[key].is_number_integer())
    return fallback;
  return metadata[key].get<int64_t>();
}

std::string Plan::metadataText(const std::string &key,
                               const std::string &fallback) const {
  json metadata =
      json::parse(metadataJson, nullptr, /*allow_exceptions=*/false);
  if (!metadata.is_object() || !metadata.contains(key) ||
      !metadata[key].is_string())
    return fallback;
  return metadata[key].get<std::string>();
}

int64_t Plan::updateGuardResult() const {
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r].metric == "update_guard")
      return static_cast<int64_t>(r);
  return -1;
}

std::optional<LrSchedule> Plan::learningRateSchedule() const {
  json metadata =
      json::parse(metadataJson, nullptr, /*allow_exceptions=*/false);
  if (!metadata.is_object() || !metadata.contains("optimizer"))
    return std::nullopt;
  const json &optimizer = metadata["optimizer"];
  if (!optimizer.is_object() || !optimizer.contains("lr_schedule") ||
      !optimizer["lr_schedule"].is_string())
    return std::nullopt;
  std::optional<LrScheduleKind> kind =
      parseLrScheduleKind(optimizer["lr_schedule"].get<std::string>());
  if (!kind)
    return std::nullopt;
  auto number = [&](const char *key) {
    return optimizer.contains(key) && optimizer[key].is_number()
               ? optimizer[key].get<double>()
               : 0.0;
  };
  // Step counts as the integers they are (through a double, 2^63 - 1
  // would overflow).
  auto count = [&](const char *key) -> int64_t {
    return optimizer.contains(key) && optimizer[key].is_number_integer()
               ? optimizer[key].get<int64_t>()
               : 0;
  };
  LrSchedule schedule;
  schedule.kind = *kind;
  schedule.peak = number("learning_rate");
  schedule.minimum = number("min_lr");
  schedule.warmupSteps = count("warmup_steps");
  schedule.decaySteps = count("decay_steps");
  schedule.wsdDecaySteps = count("wsd_decay_steps");
  if (!checkLrSchedule(schedule).empty())
    return std::nullopt;
  return schedule;
}

bool Plan::holds(const std::vector<int64_t> &holders) const {
  return holders.empty() ||
         std::find(holders.begin(), holders.end(), stage) != holders.end();
}

int64_t stageOfRank(const Plan &plan, int64_t rank) {
  if (!plan.pipelineAxis)
    return 0;
  Mesh mesh = planMesh(plan);
  return mesh.coordinates(rank)[*plan.pipelineAxis];
}

void selectStage(Plan &plan, int64_t stage) { plan.stage = stage; }

const Instruction &ScheduledAction::instruction(const ActionProgram &program,
                                                size_t index) const {
  auto found = std::lower_bound(amended.begin(), amended.end(), index,
                                [](const std::pair<size_t, Instruction> &entry,
                                   size_t at) { return entry.first < at; });
  if (found != amended.end() && found->first == index)
    return found->second;
  return program.instructions[index];
}

std::vector<TimelineEntry> stageTimeline(const Plan &plan, int64_t stage) {
  const StageProgram &stageProgram = plan.stages[stage];
  std::vector<TimelineEntry> timeline;
  for (size_t a = 0; a < stageProgram.schedule.size(); ++a) {
    const ScheduledAction &action = stageProgram.schedule[a];
    const ActionProgram &program = stageProgram.programs[action.program];
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      TimelineEntry entry;
      entry.action = a;
      entry.index = i;
      entry.instruction = &action.instruction(program, i);
      entry.axes = &program.instructionAxes[i];
      for (int64_t id : entry.instruction->inputs)
        entry.inputs.push_back(plan.bufferOf(id, action.microBatch));
      for (int64_t id : entry.instruction->outputs)
        entry.outputs.push_back(plan.bufferOf(id, action.microBatch));
      timeline.push_back(std::move(entry));
    }
  }
  return timeline;
}

std::vector<PlannedInstruction>
plannedTimeline(const Plan &plan, int64_t stage,
                const std::vector<TimelineEntry> &timeline) {
  const std::vector<int64_t> &completions = plan.stages[stage].sendCompletions;
  std::vector<PlannedInstruction> program;
  program.reserve(timeline.size());
  for (size_t i = 0; i < timeline.size(); ++i) {
    const TimelineEntry &entry = timeline[i];
    const Instruction &instruction = *entry.instruction;
    PlannedInstruction planned;
    planned.contract = findOpContract(instruction.op);
    planned.overAxes = !entry.axes->empty();
    planned.communicates = kernelCommunicates(
        planned.contract, planned.overAxes,
        [&](const std::string &name) { return instruction.text(name); });
    if (isPointToPoint(instruction)) {
      const CollectiveParameters &transfer =
          *instruction.parametersAs<CollectiveParameters>();
      planned.channel = transfer.channel;
      planned.peer = transfer.peer;
    }
    if (i < completions.size())
      planned.completesAt = completions[i];
    planned.inputs = entry.inputs;
    planned.outputs = entry.outputs;
    program.push_back(std::move(planned));
  }
  return program;
}

std::vector<TransferLink> transferLinks(const Plan &plan) {
  if (plan.stages.size() < 2)
    return {};
  Mesh mesh = planMesh(plan);
  // Per stage: the axes and peer of each send (a stage's ranks all run
  // its program).
  std::vector<std::vector<std::pair<const AxisList *, int64_t>>> sends(
      plan.stages.size());
  for (size_t s = 0; s < plan.stages.size(); ++s)
    for (const TimelineEntry &entry :
         stageTimeline(plan, static_cast<int64_t>(s)))
      if (isSend(*entry.instruction))
        sends[s].emplace_back(entry.axes, entry.instruction->integer("peer"));
  std::vector<TransferLink> links;
  for (int64_t rank = 0; rank < mesh.size(); ++rank) {
    int64_t stage = mesh.coordinates(rank)[*plan.pipelineAxis];
    for (const auto &[axes, peer] : sends[stage])
      links.push_back({rank, mesh.group(rank, *axes)[peer]});
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

void planSendCompletions(Plan &plan) {
  if (plan.stages.size() < 2)
    return;
  std::vector<std::vector<PlannedInstruction>> stages;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    plan.stages[s].sendCompletions.clear();
    stages.push_back(plannedTimeline(plan, s, stageTimeline(plan, s)));
  }
  trellis::planSendCompletions(stages);
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<int64_t> &completions = plan.stages[s].sendCompletions;
    for (const PlannedInstruction &planned : stages[s])
      completions.push_back(planned.completesAt);
  }
}

std::vector<bool> evaluationMask(const Plan &plan, int64_t stage) {
  const StageProgram &stageProgram = plan.stages[stage];
  if (!stageProgram.evaluation)
    return {};
  const StageProgram::Evaluation &evaluation = *stageProgram.evaluation;
  std::vector<bool> mask;
  for (size_t a = 0; a < stageProgram.schedule.size(); ++a) {
    const ScheduledAction &action = stageProgram.schedule[a];
    size_t count = stageProgram.programs[action.program].instructions.size();
    bool forward = std::binary_search(evaluation.actions.begin(),
                                      evaluation.actions.end(), a);
    bool step = action.microBatch < 0;
    for (size_t i = 0; i < count; ++i)
      mask.push_back(
          forward ||
          (step && std::binary_search(evaluation.stepInstructions.begin(),
                                      evaluation.stepInstructions.end(), i)));
  }
  return mask;
}

} // namespace trellis::runtime
