//===- PlanReader.cpp - Plan fields read and checked ----------------------===//

#include "PlanReader.h"

#include "trellis/Common/PlanFormat.h"
#include "trellis/Runtime/OpShapes.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>

namespace trellis::runtime::planreader {

Status PlanReader::readBuffers(const json &array) {
  for (size_t i = 0; i < array.size(); ++i) {
    std::string where = "buffer " + std::to_string(i);
    const json &entry = array[i];
    TRELLIS_RETURN_IF_ERROR(requireKind(entry, "shape", json::value_t::array,
                                        "an array of sizes", where));
    TRELLIS_RETURN_IF_ERROR(requireKind(entry, "dtype", json::value_t::string,
                                        "a dtype name", where));
    BufferDesc desc;
    const std::string &dtype = entry["dtype"].get_ref<const std::string &>();
    std::optional<DType> parsed = parseDType(dtype);
    if (!parsed)
      return Status::error(where +
                           ": expected dtype \"f32\", \"bf16\", \"f16\" or "
                           "\"i32\", found \"" +
                           dtype + "\"");
    desc.dtype = *parsed;
    const json &shape = entry["shape"];
    if (shape.size() > kMaxRank)
      return Status::error(where +
                           ": expected rank <= " + std::to_string(kMaxRank) +
                           ", found " + std::to_string(shape.size()));
    int64_t elements = 1;
    for (const json &size : shape) {
      if (!size.is_number_integer() || size.get<int64_t>() < 0)
        return Status::error(where + ": expected sizes >= 0, found " +
                             describe(shape));
      int64_t value = size.get<int64_t>();
      if (value > 0 && elements > kMaxElements / value)
        return Status::error(where + ": " + describe(shape) +
                             " holds more than 2^36 elements");
      elements *= value;
      desc.shape.push_back(value);
    }
    bool perMicroBatch = false;
    if (entry.contains("micro_batch")) {
      if (!entry["micro_batch"].is_boolean())
        return Status::error(where +
                             ": field \"micro_batch\": expected "
                             "true or false, found " +
                             describe(entry["micro_batch"]));
      perMicroBatch = entry["micro_batch"].get<bool>();
    }
    plan_.buffers.push_back(std::move(desc));
    perMicroBatch_.push_back(perMicroBatch);
  }
  return Status::success();
}

StatusOr<std::vector<size_t>>
PlanReader::resolveAxes(const std::vector<std::string> &names,
                        const std::string &where) const {
  std::vector<size_t> axes;
  for (const std::string &name : names) {
    size_t index = 0;
    while (index < plan_.mesh.size() && plan_.mesh[index].name != name)
      ++index;
    if (index == plan_.mesh.size())
      return Status::error(where + ": unknown mesh axis \"" + name + "\"");
    if (std::find(axes.begin(), axes.end(), index) != axes.end())
      return Status::error(where + ": mesh axis \"" + name +
                           "\" is listed twice");
    axes.push_back(index);
  }
  return axes;
}

Status PlanReader::readSharding(const json &value, const std::string &where,
                                Argument &argument) {
  const BufferDesc &desc = plan_.buffers[argument.buffer];
  if (!value.is_array() || value.size() != desc.shape.size())
    return Status::error(where +
                         ": expected \"sharding\" to list the axes of "
                         "each of the " +
                         std::to_string(desc.shape.size()) + " dimensions");
  std::vector<std::string> used;
  for (const json &dim : value) {
    std::vector<std::string> names;
    if (!dim.is_array())
      return Status::error(where + ": malformed sharding " + describe(value));
    for (const json &name : dim) {
      if (!name.is_string())
        return Status::error(where + ": malformed sharding " + describe(value));
      names.push_back(name.get<std::string>());
      used.push_back(names.back());
    }
    StatusOr<std::vector<size_t>> axes = resolveAxes(names, where);
    if (!axes.ok())
      return axes.status();
    argument.sharding.push_back(*axes);
  }
  std::sort(used.begin(), used.end());
  if (std::adjacent_find(used.begin(), used.end()) != used.end())
    return Status::error(where + ": a mesh axis splits two dimensions");
  return Status::success();
}

Status PlanReader::readGlobalShape(const json &shape, const std::string &where,
                                   Argument &argument) {
  const std::vector<int64_t> &local = plan_.buffers[argument.buffer].shape;
  if (!shape.is_array() || shape.size() != local.size())
    return Status::error(where + ": field \"global_shape\": expected " +
                         std::to_string(local.size()) + " sizes, found " +
                         describe(shape));
  int64_t whole = 1;
  for (size_t d = 0; d < local.size(); ++d) {
    if (!shape[d].is_number_integer() || shape[d].get<int64_t>() < 0 ||
        shape[d].get<int64_t>() > kMaxElements)
      return Status::error(where +
                           ": field \"global_shape\": malformed "
                           "size " +
                           describe(shape[d]));
    int64_t size = shape[d].get<int64_t>();
    whole *= size;
    if (whole > kMaxElements)
      return Status::error(where + ": field \"global_shape\": more than 2^36 "
                                   "elements");
    int64_t pieces = 1;
    if (d < argument.sharding.size())
      for (size_t axis : argument.sharding[d])
        pieces *= plan_.mesh[axis].size;
    // Each piece rounds up; the last ones are padded.
    if ((size + pieces - 1) / pieces != local[d])
      return Status::error(where + ": field \"global_shape\": dimension " +
                           std::to_string(d) + " of size " +
                           std::to_string(size) + " split in " +
                           std::to_string(pieces) + " gives pieces of " +
                           std::to_string((size + pieces - 1) / pieces) +
                           ", the buffer has " + std::to_string(local[d]));
    argument.globalShape.push_back(size);
  }
  return Status::success();
}

Status PlanReader::readSequenceChunks(const json &value,
                                      const std::string &where,
                                      Argument &argument) {
  const std::vector<int64_t> &local = plan_.buffers[argument.buffer].shape;
  if (!value.is_number_integer() || value.get<int64_t>() < 2 ||
      value.get<int64_t>() > kMaxElements)
    return Status::error(where +
                         ": field \"sequence_chunks\": expected an "
                         "integer >= 2, found " +
                         describe(value));
  if (local.size() < 2)
    return Status::error(where +
                         ": field \"sequence_chunks\": expected an "
                         "input of rank >= 2 (dimension 1 the "
                         "sequence), found shape " +
                         formatShape(local));
  int64_t pieces = 1;
  if (argument.sharding.size() > 1)
    for (size_t axis : argument.sharding[1])
      pieces *= plan_.mesh[axis].size;
  int64_t chunks = value.get<int64_t>(), sequence = local[1] * pieces;
  if (sequence % chunks != 0)
    return Status::error(
        where + ": field \"sequence_chunks\": " + std::to_string(chunks) +
        " chunks do not divide the sequence of " + std::to_string(sequence));
  argument.sequenceChunks = chunks;
  return Status::success();
}

Status PlanReader::readArguments(const json &array) {
  static const std::map<std::string, ArgumentRole> roles = {
      {"param", ArgumentRole::Param},          {"input", ArgumentRole::Input},
      {"adam_m", ArgumentRole::AdamM},         {"adam_v", ArgumentRole::AdamV},
      {"master", ArgumentRole::Master},        {"step", ArgumentRole::Step},
      {"loss_scale", ArgumentRole::LossScale}, {"state", ArgumentRole::State}};
  for (size_t i = 0; i < array.size(); ++i) {
    std::string where = "argument " + std::to_string(i);
    const json &entry = array[i];
    TRELLIS_RETURN_IF_ERROR(requireKind(
        entry, "buffer", json::value_t::number_integer, "a buffer id", where));
    TRELLIS_RETURN_IF_ERROR(
        requireKind(entry, "role", json::value_t::string, "a role", where));
    Argument argument;
    TRELLIS_RETURN_IF_ERROR(
        checkBufferId(entry["buffer"], where, &argument.buffer));
    auto role = roles.find(entry["role"].get<std::string>());
    if (role == roles.end())
      return Status::error(where + ": unknown role \"" +
                           entry["role"].get<std::string>() +
                           "\"; expected param, input, adam_m, adam_v, master, "
                           "step, loss_scale or state");
    argument.role = role->second;
    if (entry.contains("param")) {
      if (!entry["param"].is_string())
        return Status::error(where + ": field \"param\": expected a name");
      argument.name = entry["param"].get<std::string>();
    }
    if (entry.contains("init")) {
      if (!entry["init"].is_string())
        return Status::error(where + ": field \"init\": expected a string");
      argument.init = entry["init"].get<std::string>();
    }
    if (entry.contains("sharding"))
      TRELLIS_RETURN_IF_ERROR(readSharding(entry["sharding"], where, argument));
    TRELLIS_RETURN_IF_ERROR(readStageList(entry, where, argument.stages));
    if (entry.contains("global_shape"))
      TRELLIS_RETURN_IF_ERROR(
          readGlobalShape(entry["global_shape"], where, argument));
    if (entry.contains("file_shape")) {
      const json &shape = entry["file_shape"];
      int64_t local = plan_.buffers[argument.buffer].numElements(), whole = 1;
      int64_t pieces = 1;
      for (const std::vector<size_t> &axes : argument.sharding)
        for (size_t axis : axes)
          pieces *= plan_.mesh[axis].size;
      if (!argument.globalShape.empty()) {
        local = 1;
        pieces = 1;
        for (int64_t size : argument.globalShape)
          local *= size;
      }
      if (!shape.is_array() || shape.size() > kMaxRank)
        return Status::error(where + ": malformed file_shape");
      for (const json &size : shape) {
        if (!size.is_number_integer() || size.get<int64_t>() < 0 ||
            size.get<int64_t>() > kMaxElements)
          return Status::error(where + ": malformed file_shape");
        whole *= size.get<int64_t>();
        if (whole > kMaxElements)
          return Status::error(where + ": malformed file_shape");
        argument.fileShape.push_back(size.get<int64_t>());
      }
      if (whole != local * pieces)
        return Status::error(where + ": file_shape " + describe(shape) +
                             " holds " + std::to_string(whole) +
                             " elements, the tensor " +
                             std::to_string(local * pieces));
    }
    const BufferDesc &desc = plan_.buffers[argument.buffer];
    switch (argument.role) {
    case ArgumentRole::Input:
      if (desc.dtype != DType::I32)
        return Status::error(where + ": an input must be an i32 buffer");
      if (argument.name != "tokens" && argument.name != "targets")
        return Status::error(where + ": unknown input \"" + argument.name +
                             "\"; expected tokens or targets");
      if (plan_.microBatches > 1 && !perMicroBatch_[argument.buffer])
        return Status::error(where + ": an input holds one micro-batch: "
                                     "expected its buffer marked "
                                     "micro_batch");
      if (entry.contains("sequence_chunks"))
        TRELLIS_RETURN_IF_ERROR(
            readSequenceChunks(entry["sequence_chunks"], where, argument));
      break;
    case ArgumentRole::Step:
    case ArgumentRole::LossScale:
      if (desc.dtype != DType::F32 || !desc.shape.empty())
        return Status::error(
            where + ": the " +
            (argument.role == ArgumentRole::Step ? "step" : "loss scale") +
            " must be a scalar f32 buffer");
      break;
    default:
      if (argument.role == ArgumentRole::Param ? desc.dtype == DType::I32
                                               : desc.dtype != DType::F32)
        return Status::error(
            where + (argument.role == ArgumentRole::Param
                         ? ": a parameter must be an f32, bf16 or f16 buffer"
                         : ": optimizer states, master weights and states "
                           "must be f32 buffers"));
      if (argument.name.empty())
        return Status::error(where + ": a parameter needs a name");
      if (argument.init != "zeros" && argument.init != "ones" &&
          argument.init.rfind("normal:", 0) != 0)
        return Status::error(where +
                             ": expected init zeros, ones or "
                             "normal:<std>, found \"" +
                             argument.init + "\"");
      if (argument.init.rfind("normal:", 0) == 0) {
        char *end = nullptr;
        std::string text = argument.init.substr(7);
        double std = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(std >= 0))
          return Status::error(where + ": malformed init \"" + argument.init +
                               "\"");
      }
    }
    plan_.arguments.push_back(std::move(argument));
  }
  return Status::success();
}

StatusOr<AttrValue> readAttr(const json &value, const std::string &where) {
  AttrValue attr;
  if (value.is_boolean()) {
    attr.kind = AttrValue::Kind::Bool;
    attr.flag = value.get<bool>();
  } else if (value.is_number_integer()) {
    attr.kind = AttrValue::Kind::Int;
    attr.integer = value.get<int64_t>();
  } else if (value.is_number_float()) {
    attr.kind = AttrValue::Kind::Real;
    attr.real = value.get<double>();
  } else if (value.is_string()) {
    attr.kind = AttrValue::Kind::String;
    attr.text = value.get<std::string>();
  } else if (value.is_array() && !value.empty() &&
             std::all_of(value.begin(), value.end(),
                         [](const json &e) { return e.is_string(); })) {
    attr.kind = AttrValue::Kind::Strings;
    for (const json &element : value)
      attr.texts.push_back(element.get<std::string>());
  } else if (value.is_array()) {
    bool allIntegers = true;
    for (const json &element : value) {
      if (!element.is_number())
        return Status::error(where + ": expected an array of numbers, found " +
                             describe(value));
      allIntegers &= element.is_number_integer();
    }
    if (allIntegers)
      for (const json &element : value)
        attr.ints.push_back(element.get<int64_t>());
    // An all-integer array is also readable as reals.
    attr.kind = allIntegers ? AttrValue::Kind::Ints : AttrValue::Kind::Reals;
    for (const json &element : value)
      attr.reals.push_back(element.get<double>());
  } else {
    return Status::error(where + ": unsupported attribute value " +
                         describe(value));
  }
  return attr;
}

Status PlanReader::readStageList(const json &entry, const std::string &where,
                                 std::vector<int64_t> &stages) const {
  if (!entry.contains("stages"))
    return Status::success();
  const json &list = entry["stages"];
  int64_t count = static_cast<int64_t>(plan_.stages.size());
  if (!list.is_array() || list.empty())
    return Status::error(where + ": field \"stages\": expected a non-empty "
                                 "array of stage indices");
  for (const json &stage : list) {
    if (!stage.is_number_integer() || stage.get<int64_t>() < 0 ||
        stage.get<int64_t>() >= count)
      return Status::error(where + ": field \"stages\": stage " +
                           describe(stage) + " is out of range [0, " +
                           std::to_string(count) + ")");
    stages.push_back(stage.get<int64_t>());
  }
  return Status::success();
}

Status PlanReader::readProgram(const json &stages) {
  if (stages.empty())
    return Status::error("expected at least one stage, found none");
  if (stages.size() > 1) {
    // Stages are the coordinates along the pipeline axis.
    if (!root_->contains("pipeline_axis") ||
        !(*root_)["pipeline_axis"].is_string())
      return Status::error("a plan of " + std::to_string(stages.size()) +
                           " stages needs \"pipeline_axis\": the mesh axis "
                           "that numbers them");
    std::string name = (*root_)["pipeline_axis"].get<std::string>();
    StatusOr<std::vector<size_t>> axis = resolveAxes({name}, "pipeline_axis");
    if (!axis.ok())
      return axis.status();
    if (plan_.mesh[axis->front()].size != static_cast<int64_t>(stages.size()))
      return Status::error("the pipeline axis '" + name + "' has size " +
                           std::to_string(plan_.mesh[axis->front()].size) +
                           ", the plan " + std::to_string(stages.size()) +
                           " stages");
    plan_.pipelineAxis = axis->front();
  }
  programs_.resize(stages.size());
  schedules_.resize(stages.size());
  evaluations_.resize(stages.size());
  for (size_t s = 0; s < stages.size(); ++s)
    TRELLIS_RETURN_IF_ERROR(readStage(stages[s], static_cast<int64_t>(s)));
  for (size_t s = 1; s < stages.size(); ++s)
    if (evaluations_[s].has_value() != evaluations_[0].has_value())
      return Status::error(
          "stage " + std::to_string(evaluations_[0] ? s : 0) +
          " has no \"evaluation\" while stage " +
          std::to_string(evaluations_[0] ? 0 : s) +
          " has one: a plan evaluates on every stage or on none");
  // Transfers of micro-batches get a channel per micro-batch; those of the
  // step come after all of them.
  for (const std::vector<ActionProgramDesc> &programs : programs_)
    for (const ActionProgramDesc &program : programs)
      if (program.perMicroBatch())
        for (const Instruction &instruction : program.body.instructions)
          if (isPointToPoint(instruction))
            channels_ = std::max(channels_, instruction.integer("channel") + 1);
  for (size_t s = 0; s < stages.size(); ++s)
    TRELLIS_RETURN_IF_ERROR(bindStage(static_cast<int64_t>(s)));
  return Status::success();
}

Status PlanReader::readStage(const json &stage, int64_t index) {
  // "stage 1: " before what a message names, in plans of several stages.
  std::string prefix =
      plan_.stages.size() > 1 ? "stage " + std::to_string(index) + ": " : "";
  std::string where = "stage " + std::to_string(index);
  TRELLIS_RETURN_IF_ERROR(requireKind(stage, "programs", json::value_t::array,
                                      "an array of action programs", where));
  TRELLIS_RETURN_IF_ERROR(requireKind(stage, "schedule", json::value_t::array,
                                      "an array of actions", where));
  if (stage.contains("stage") && (!stage["stage"].is_number_integer() ||
                                  stage["stage"].get<int64_t>() != index))
    return Status::error(where + ": field \"stage\": expected " +
                         std::to_string(index) + ", found " +
                         describe(stage["stage"]));
  std::vector<ActionProgramDesc> &programs = programs_[index];
  for (size_t p = 0; p < stage["programs"].size(); ++p) {
    const json &entry = stage["programs"][p];
    std::string at = prefix + "program " + std::to_string(p);
    TRELLIS_RETURN_IF_ERROR(
        requireKind(entry, "name", json::value_t::string, "a name", at));
    TRELLIS_RETURN_IF_ERROR(requireKind(entry, "program", json::value_t::array,
                                        "an array of instructions", at));
    std::string name = entry["name"].get<std::string>();
    std::optional<ActionProgramName> parsed = parseProgramName(name);
    if (!parsed)
      return Status::error(at + ": unknown program \"" + name +
                           "\"; expected step, or forward, backward or weight "
                           "(with _receive for its receives) then .c<chunk>");
    for (const ActionProgramDesc &other : programs)
      if (other.name == name)
        return Status::error(at + ": a second program \"" + name + "\"");
    std::optional<ActionProgramDesc> desc = ActionProgramDesc();
    static_cast<ActionProgramName &>(*desc) = *parsed;
    desc->name = name;
    desc->body.name = name;
    if (desc->chunk >= kMaxChunks)
      return Status::error(at + ": chunk " + std::to_string(desc->chunk) +
                           " is out of range [0, " +
                           std::to_string(kMaxChunks) + ")");
    TRELLIS_RETURN_IF_ERROR(
        readInstructions(entry["program"], prefix + name, desc->body));
    TRELLIS_RETURN_IF_ERROR(checkActionProgram(*desc, prefix + name));
    programs.push_back(std::move(*desc));
  }
  // The schedule: each program of a micro-batch once per micro-batch, the
  // step program once, last.
  const json &schedule = stage["schedule"];
  std::vector<std::set<int64_t>> ran(programs.size());
  for (size_t e = 0; e < schedule.size(); ++e) {
    std::string at = prefix + "schedule entry " + std::to_string(e);
    if (!schedule[e].is_string())
      return Status::error(at + ": expected an action name, found " +
                           describe(schedule[e]));
    std::string text = schedule[e].get<std::string>();
    std::optional<ScheduledActionName> name = parseActionName(text);
    if (!name)
      return Status::error(at + ": unknown action \"" + text +
                           "\"; expected F<i>, B<i> or W<i> (micro-batch i, "
                           "with .c<chunk>), R before one of them for its "
                           "receives, or step");
    bool step = name->program.kind == ActionKind::Step;
    if (!step && name->microBatch >= plan_.microBatches)
      return Status::error(at + " (" + text + "): micro-batch " +
                           std::to_string(name->microBatch) +
                           " is out of range [0, " +
                           std::to_string(plan_.microBatches) + ")");
    int64_t found = -1;
    for (size_t p = 0; p < programs.size() && found < 0; ++p)
      if (programs[p].kind == name->program.kind &&
          programs[p].receives == name->program.receives &&
          (step || programs[p].chunk == name->program.chunk))
        found = static_cast<int64_t>(p);
    if (found < 0)
      return Status::error(at + " (" + text + "): the stage has no program " +
                           programName(name->program));
    if (!ran[found].insert(name->microBatch).second)
      return Status::error(at + " (" + text + "): " + programs[found].name +
                           " already ran for this micro-batch");
    if (step && e + 1 != schedule.size())
      return Status::error(at + ": the step program must run last, after "
                                "every micro-batch");
    schedules_[index].emplace_back(found, name->microBatch);
  }
  for (size_t p = 0; p < programs.size(); ++p) {
    size_t expected = programs[p].perMicroBatch() ? plan_.microBatches : 1;
    if (ran[p].size() != expected)
      return Status::error(
          prefix + "program " + programs[p].name + " runs " +
          std::to_string(ran[p].size()) + " times in the schedule, expected " +
          std::to_string(expected) +
          (programs[p].perMicroBatch() ? " (once per micro-batch)" : ""));
  }
  if (stage.contains("evaluation"))
    TRELLIS_RETURN_IF_ERROR(readEvaluation(stage, index, prefix));
  return Status::success();
}

Status PlanReader::readEvaluation(const json &stage, int64_t index,
                                  const std::string &prefix) {
  std::string where = prefix + "evaluation";
  const json &evaluation = stage["evaluation"];
  TRELLIS_RETURN_IF_ERROR(requireKind(
      evaluation, "actions", json::value_t::array,
      "an array of the schedule's forward actions, in its order", where));
  TRELLIS_RETURN_IF_ERROR(requireKind(
      evaluation, "step_instructions", json::value_t::array,
      "an array of the step program's instructions, ascending", where));
  const json &schedule = stage["schedule"];
  const std::vector<ActionProgramDesc> &programs = programs_[index];
  const std::vector<std::pair<int64_t, int64_t>> &runs = schedules_[index];
  StageProgram::Evaluation desc;
  size_t next = 0;
  for (size_t e = 0; e < evaluation["actions"].size(); ++e) {
    const json &entry = evaluation["actions"][e];
    std::string at = where + " action " + std::to_string(e);
    if (!entry.is_string())
      return Status::error(at + ": expected an action name, found " +
                           describe(entry));
    size_t position = next;
    while (position < schedule.size() && schedule[position] != entry)
      ++position;
    if (position == schedule.size())
      return Status::error(
          at + " (" + entry.get<std::string>() +
          "): expected an action of the schedule after the evaluation's "
          "previous one, found none");
    if (programs[runs[position].first].kind != ActionKind::Forward)
      return Status::error(at + " (" + entry.get<std::string>() +
                           "): expected a forward action or its receives; "
                           "an evaluation neither differentiates nor steps");
    desc.actions.push_back(position);
    next = position + 1;
  }
  size_t stepCount = 0;
  for (const ActionProgramDesc &program : programs)
    if (program.kind == ActionKind::Step)
      stepCount = program.body.instructions.size();
  for (size_t e = 0; e < evaluation["step_instructions"].size(); ++e) {
    const json &entry = evaluation["step_instructions"][e];
    int64_t floor =
        desc.stepInstructions.empty()
            ? 0
            : static_cast<int64_t>(desc.stepInstructions.back()) + 1;
    if (!entry.is_number_integer() || entry.get<int64_t>() < floor ||
        entry.get<int64_t>() >= static_cast<int64_t>(stepCount))
      return Status::error(where + " step instruction " + std::to_string(e) +
                           ": expected an index of the step program in [" +
                           std::to_string(floor) + ", " +
                           std::to_string(stepCount) + ") (ascending), found " +
                           describe(entry));
    desc.stepInstructions.push_back(entry.get<size_t>());
  }
  evaluations_[index] = std::move(desc);
  return Status::success();
}

Status PlanReader::readInstructions(const json &program,
                                    const std::string &where,
                                    ActionProgram &into) {
  for (size_t i = 0; i < program.size(); ++i) {
    std::string at = where + " instruction " + std::to_string(i);
    const json &entry = program[i];
    TRELLIS_RETURN_IF_ERROR(
        requireKind(entry, "op", json::value_t::string, "an op name", at));
    TRELLIS_RETURN_IF_ERROR(requireKind(entry, "inputs", json::value_t::array,
                                        "an array of buffer ids", at));
    TRELLIS_RETURN_IF_ERROR(requireKind(entry, "outputs", json::value_t::array,
                                        "an array of buffer ids", at));
    Instruction instruction;
    instruction.op = entry["op"].get<std::string>();
    at += " (" + instruction.op + ")";
    for (const json &id : entry["inputs"]) {
      int64_t buffer;
      TRELLIS_RETURN_IF_ERROR(checkBufferId(id, at, &buffer));
      instruction.inputs.push_back(buffer);
    }
    for (const json &id : entry["outputs"]) {
      int64_t buffer;
      TRELLIS_RETURN_IF_ERROR(checkBufferId(id, at, &buffer));
      instruction.outputs.push_back(buffer);
    }
    if (entry.contains("attrs")) {
      if (!entry["attrs"].is_object())
        return Status::error(at + ": field \"attrs\": expected an object");
      for (auto &[name, value] : entry["attrs"].items()) {
        StatusOr<AttrValue> attr = readAttr(value, at + " attribute " + name);
        if (!attr.ok())
          return attr.status();
        instruction.attrs[name] = std::move(*attr);
      }
    }
    std::vector<size_t> axes;
    if (instruction.attrs.count("axes")) {
      StatusOr<std::vector<size_t>> resolved =
          resolveAxes(instruction.texts("axes"), at);
      if (!resolved.ok())
        return resolved.status();
      axes = *resolved;
    }
    TRELLIS_RETURN_IF_ERROR(
        validateInstruction(instruction, plan_.buffers, axes, planMesh(plan_))
            .withContext(at));
    instruction.resolve();
    into.instructions.push_back(std::move(instruction));
    into.instructionAxes.push_back(std::move(axes));
  }
  return Status::success();
}

Status PlanReader::readMetricReport(const json &entry, const std::string &where,
                                    Result &result) const {
  const json &report = entry["report"];
  std::string field = where + ": field \"report\"";
  if (result.metric.empty())
    return Status::error(field + ": expected a \"metric\" to report");
  if (!report.is_object() || !report.contains("label") ||
      !report["label"].is_string() ||
      report["label"].get<std::string>().empty() ||
      !report.contains("summary") || !report["summary"].is_string())
    return Status::error(field +
                         ": expected {\"label\": TEXT, \"summary\": "
                         "\"value\" or \"max_over_mean\"}, found " +
                         describe(report));
  std::optional<MetricSummary> summary =
      parseMetricSummary(report["summary"].get<std::string>());
  if (!summary)
    return Status::error(field +
                         ": expected the summary \"value\" or "
                         "\"max_over_mean\", found " +
                         describe(report["summary"]));
  const BufferDesc &value = plan_.buffers[result.buffer];
  int64_t rank = metricSummaryRank(*summary);
  if (value.dtype != DType::F32 ||
      static_cast<int64_t>(value.shape.size()) != rank)
    return Status::error(where + ": the " + result.metric + " metric's " +
                         std::string(metricSummaryName(*summary)) +
                         " summary reads " +
                         (rank == 0 ? "an f32 scalar" : "f32 [rows, columns]"));
  result.report = Result::Report{report["label"].get<std::string>(), *summary};
  return Status::success();
}

Status PlanReader::readResults(const json &array) {
  for (size_t i = 0; i < array.size(); ++i) {
    std::string where = "result " + std::to_string(i);
    const json &entry = array[i];
    TRELLIS_RETURN_IF_ERROR(requireKind(
        entry, "buffer", json::value_t::number_integer, "a buffer id", where));
    Result result;
    TRELLIS_RETURN_IF_ERROR(
        checkBufferId(entry["buffer"], where, &result.buffer));
    // Results name buffers of the plan file, not the copies the stages'
    // expansion added for each micro-batch.
    if (result.buffer >= static_cast<int64_t>(perMicroBatch_.size()))
      return Status::error(where + ": buffer id " +
                           std::to_string(result.buffer) +
                           " is out of range [0, " +
                           std::to_string(perMicroBatch_.size()) + ")");
    for (const char *key : {"updates", "gradient_of"}) {
      if (!entry.contains(key))
        continue;
      const json &index = entry[key];
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() >= static_cast<int64_t>(plan_.arguments.size()))
        return Status::error(where + ": field \"" + key +
                             "\": argument index " + describe(index) +
                             " is out of range [0, " +
                             std::to_string(plan_.arguments.size()) + ")");
      const BufferDesc &target =
          plan_.buffers[plan_.arguments[index.get<int64_t>()].buffer];
      const BufferDesc &source = plan_.buffers[result.buffer];
      if (target.shape != source.shape || target.dtype != source.dtype)
        return Status::error(where +
                             ": its buffer does not match the shape "
                             "of argument " +
                             std::to_string(index.get<int64_t>()));
      (std::string(key) == "updates" ? result.updates : result.gradientOf) =
          index.get<int64_t>();
    }
    if (perMicroBatch_[result.buffer])
      return Status::error(where + ": buffer " + std::to_string(result.buffer) +
                           " holds one micro-batch's value; results are the "
                           "step's");
    if (entry.contains("role") && !entry["role"].is_string())
      return Status::error(where +
                           ": field \"role\": expected a string (\"loss\" "
                           "or another result's role), found " +
                           describe(entry["role"]));
    result.isLoss = entry.contains("role") && entry["role"] == "loss";
    if (entry.contains("metric")) {
      const json &metric = entry["metric"];
      if (!metric.is_string() || metric.get<std::string>().empty())
        return Status::error(where +
                             ": field \"metric\": expected a metric's "
                             "name, found " +
                             describe(metric));
      result.metric = metric.get<std::string>();
      // The runtime acts on the update guard: an f32 scalar.
      const BufferDesc &value = plan_.buffers[result.buffer];
      if (result.metric == "update_guard" &&
          (value.dtype != DType::F32 || !value.shape.empty()))
        return Status::error(where + ": the update_guard metric must be an f32 "
                                     "scalar");
    }
    if (entry.contains("report"))
      TRELLIS_RETURN_IF_ERROR(readMetricReport(entry, where, result));
    TRELLIS_RETURN_IF_ERROR(readStageList(entry, where, result.stages));
    if (result.updates && !result.stages.empty() &&
        result.stages != plan_.arguments[*result.updates].stages)
      return Status::error(where + ": it updates argument " +
                           std::to_string(*result.updates) +
                           " but is produced on other stages than hold it");
    plan_.results.push_back(result);
  }
  if (plan_.results.empty() || !plan_.results[0].isLoss)
    return Status::error("expected result 0 to be the loss");
  const BufferDesc &loss = plan_.buffers[plan_.results[0].buffer];
  if (!loss.shape.empty() || loss.dtype != DType::F32)
    return Status::error("expected the loss to be a scalar f32 buffer");
  return Status::success();
}

Status PlanReader::checkVocabulary() const {
  if (!root_->contains("metadata") || !(*root_)["metadata"].is_object() ||
      !(*root_)["metadata"].contains("vocab_size"))
    return Status::success();
  const json &field = (*root_)["metadata"]["vocab_size"];
  if (!field.is_number_integer() || field.get<int64_t>() < 1 ||
      field.get<int64_t>() > INT32_MAX)
    return Status::error("metadata: field \"vocab_size\": expected an "
                         "integer in [1, 2^31), found " +
                         describe(field));
  // Each loss's class dimension: the vocabulary, or this rank's piece of
  // it when the loss is split over mesh axes (rounded up, the last pieces
  // padded).
  int64_t vocab = field.get<int64_t>();
  Mesh mesh = planMesh(plan_);
  for (const std::vector<ActionProgramDesc> &programs : programs_)
    for (const ActionProgramDesc &program : programs)
      for (size_t i = 0; i < program.body.instructions.size(); ++i) {
        const Instruction &instruction = program.body.instructions[i];
        if (!isLoss(instruction))
          continue;
        int64_t classes = plan_.buffers[instruction.inputs[0]].shape.back();
        int64_t pieces = 1;
        for (size_t axis : program.body.instructionAxes[i])
          pieces *= mesh.axes()[axis].size;
        if (classes != (vocab + pieces - 1) / pieces)
          return Status::error(
              "metadata: vocab_size " + std::to_string(vocab) +
              " disagrees "
              "with " +
              program.name + " instruction " + std::to_string(i) +
              " (cross_entropy), whose logits have " + std::to_string(classes) +
              " classes" +
              (pieces > 1 ? " in each of " + std::to_string(pieces) + " pieces"
                          : std::string()));
      }
  return Status::success();
}

StatusOr<Plan> PlanReader::read(const json &root) {
  if (!root.is_object())
    return Status::error("expected a JSON object at the top level");
  if (!root.contains("format") || !root["format"].is_string() ||
      root["format"].get<std::string>() != kPlanFormatName)
    return Status::error("expected \"format\": \"trellis-plan\", found " +
                         (root.contains("format") ? describe(root["format"])
                                                  : std::string("none")));
  TRELLIS_RETURN_IF_ERROR(requireKind(
      root, "version", json::value_t::number_integer, "an integer", "plan"));
  int64_t version = root["version"].get<int64_t>();
  if (version != kPlanFormatVersion)
    return Status::error("unsupported plan version " + std::to_string(version) +
                         " (this runtime reads version " +
                         std::to_string(kPlanFormatVersion) + ")");
  for (const char *key : {"buffers", "arguments", "results", "stages", "mesh"})
    TRELLIS_RETURN_IF_ERROR(
        requireKind(root, key, json::value_t::array, "an array", "plan"));
  if (root.contains("metadata"))
    plan_.metadataJson = root["metadata"].dump();
  for (size_t i = 0; i < root["mesh"].size(); ++i) {
    const json &axis = root["mesh"][i];
    std::string where = "mesh axis " + std::to_string(i);
    TRELLIS_RETURN_IF_ERROR(
        requireKind(axis, "name", json::value_t::string, "a name", where));
    TRELLIS_RETURN_IF_ERROR(requireKind(
        axis, "size", json::value_t::number_integer, "an integer", where));
    plan_.mesh.push_back(
        {axis["name"].get<std::string>(), axis["size"].get<int64_t>()});
  }
  MeshError meshError;
  if (!Mesh::create(plan_.mesh, &meshError))
    return Status::error("mesh: " + meshError.message);
  root_ = &root;
  if (root.contains("micro_batches")) {
    const json &count = root["micro_batches"];
    if (!count.is_number_integer() || count.get<int64_t>() < 1 ||
        count.get<int64_t>() > kMaxMicroBatches)
      return Status::error("field \"micro_batches\": expected an integer in "
                           "[1, " +
                           std::to_string(kMaxMicroBatches) + "], found " +
                           describe(count));
    plan_.microBatches = count.get<int64_t>();
  }
  TRELLIS_RETURN_IF_ERROR(readBuffers(root["buffers"]));
  size_t fileBuffers = plan_.buffers.size();
  // Arguments name stages by index: their count first, programs after.
  plan_.stages.resize(root["stages"].size());
  TRELLIS_RETURN_IF_ERROR(readArguments(root["arguments"]));
  TRELLIS_RETURN_IF_ERROR(readProgram(root["stages"]));
  TRELLIS_RETURN_IF_ERROR(readResults(root["results"]));
  if (!plan_.holds(plan_.results[0].stages) ||
      plan_.results[0].stages.size() > 1)
    return Status::error("expected the loss on stage 0 alone (it reports "
                         "the loss)");
  TRELLIS_RETURN_IF_ERROR(checkVocabulary());
  expandInputs();
  bindMicroBatches(fileBuffers);
  for (size_t stage = 0; stage < plan_.stages.size(); ++stage) {
    TRELLIS_RETURN_IF_ERROR(checkDataflow(stage));
    if (plan_.stages[stage].evaluation)
      TRELLIS_RETURN_IF_ERROR(checkDataflow(stage, /*evaluation=*/true));
  }
  TRELLIS_RETURN_IF_ERROR(checkTransfers());
  planSendCompletions(plan_);
  selectStage(plan_, 0);
  return std::move(plan_);
}

} // namespace trellis::runtime::planreader
