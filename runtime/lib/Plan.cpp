//===- Plan.cpp - The plan file, loaded and validated ---------------------===//

#include "trellis/Runtime/Plan.h"

#include "trellis/Common/ActionNames.h"
#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/OpShapes.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>

#include <limits>
#include <set>

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

namespace {

/// Largest buffer the runtime accepts: 2^36 elements (256 GiB of f32).
constexpr int64_t kMaxElements = int64_t(1) << 36;
constexpr size_t kMaxRank = 8;
/// Model chunks per stage and micro-batches per step the runtime accepts.
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kMaxMicroBatches = int64_t(1) << 20;

std::string describe(const json &value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

/// An action program of a stage as the plan file has it.
struct ActionProgramDesc : ActionProgramName {
  std::string name;
  StageProgram body;
  bool perMicroBatch() const { return kind != ActionKind::Step; }
};

/// Reads plan JSON into a Plan, checking every field's kind and range.
class PlanReader {
public:
  StatusOr<Plan> read(const json &root);

private:
  Status readBuffers(const json &array);
  Status readArguments(const json &array);
  Status readSharding(const json &value, const std::string &where,
                      Argument &argument);
  /// An argument's global_shape (after its sharding).
  Status readGlobalShape(const json &shape, const std::string &where,
                         Argument &argument);
  /// An input's sequence_chunks: >= 2, dividing its whole sequence.
  Status readSequenceChunks(const json &value, const std::string &where,
                            Argument &argument);
  StatusOr<std::vector<size_t>>
  resolveAxes(const std::vector<std::string> &names,
              const std::string &where) const;
  Status readProgram(const json &stages);
  Status readInstructions(const json &program, const std::string &where,
                          StageProgram &stage);
  /// One stage's action programs and schedule.
  Status readStage(const json &stage, int64_t index);
  /// Checks the scopes of an action program's buffers (a micro-batch's
  /// values only in the micro-batch's programs; accumulate from one to the
  /// step).
  Status checkActionProgram(const ActionProgramDesc &program,
                            const std::string &where);
  /// Expands a stage's schedule into the program it runs per step.
  Status expandStage(int64_t index);
  /// Each micro-batch's input buffers as arguments of their own.
  void expandInputs();
  /// The buffer that holds `buffer`'s value for `microBatch` (per-micro-
  /// batch buffers have one copy per micro-batch; micro-batch 0 keeps the
  /// plan's id).
  int64_t bufferFor(int64_t buffer, int64_t microBatch);
  Status checkCompletions(int64_t stage);
  Status readStageList(const json &entry, const std::string &where,
                       std::vector<int64_t> &stages) const;
  Status readResults(const json &array);
  Status checkDataflow(int64_t stage);

  static Status requireKind(const json &object, const char *key,
                            json::value_t kind, const char *expected,
                            const std::string &where) {
    if (!object.is_object() || !object.contains(key))
      return Status::error(where + ": missing field \"" + key + "\" (" +
                           expected + ")");
    const json &value = object[key];
    bool matches =
        value.type() == kind ||
        (kind == json::value_t::number_integer && value.is_number_unsigned());
    if (!matches)
      return Status::error(where + ": field \"" + key + "\": expected " +
                           expected + ", found " + describe(value));
    return Status::success();
  }

  Status checkBufferId(const json &value, const std::string &where,
                       int64_t *id) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(plan_.buffers.size()))
      return Status::error(where + ": buffer id " + describe(value) +
                           " is out of range [0, " +
                           std::to_string(plan_.buffers.size()) + ")");
    *id = value.get<int64_t>();
    return Status::success();
  }

  Plan plan_;
  /// The plan's JSON while it is read.
  const json *root_ = nullptr;
  /// Per buffer of the plan file: whether it is one micro-batch's.
  std::vector<bool> perMicroBatch_;
  /// Per stage: its action programs and schedule, before expansion.
  std::vector<std::vector<ActionProgramDesc>> programs_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> schedules_;
  /// Copies of per-micro-batch buffers, by (buffer, micro-batch >= 1).
  std::map<std::pair<int64_t, int64_t>, int64_t> copies_;
  /// Channels of the micro-batches' transfers: [0, channels_) per
  /// micro-batch.
  int64_t channels_ = 0;
};

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
        return Status::error(where + ": field \"micro_batch\": expected "
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
      return Status::error(where + ": field \"global_shape\": malformed "
                                   "size " + describe(shape[d]));
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
      return Status::error(
          where + ": field \"global_shape\": dimension " + std::to_string(d) +
          " of size " + std::to_string(size) + " split in " +
          std::to_string(pieces) + " gives pieces of " +
          std::to_string((size + pieces - 1) / pieces) + ", the buffer has " +
          std::to_string(local[d]));
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
    return Status::error(where + ": field \"sequence_chunks\": expected an "
                                 "integer >= 2, found " + describe(value));
  if (local.size() < 2)
    return Status::error(where + ": field \"sequence_chunks\": expected an "
                                 "input of rank >= 2 (dimension 1 the "
                                 "sequence), found shape " +
                         formatShape(local));
  int64_t pieces = 1;
  if (argument.sharding.size() > 1)
    for (size_t axis : argument.sharding[1])
      pieces *= plan_.mesh[axis].size;
  int64_t chunks = value.get<int64_t>(), sequence = local[1] * pieces;
  if (sequence % chunks != 0)
    return Status::error(where + ": field \"sequence_chunks\": " +
                         std::to_string(chunks) +
                         " chunks do not divide the sequence of " +
                         std::to_string(sequence));
  argument.sequenceChunks = chunks;
  return Status::success();
}

Status PlanReader::readArguments(const json &array) {
  static const std::map<std::string, ArgumentRole> roles = {
      {"param", ArgumentRole::Param},
      {"input", ArgumentRole::Input},
      {"adam_m", ArgumentRole::AdamM},
      {"adam_v", ArgumentRole::AdamV},
      {"master", ArgumentRole::Master},
      {"step", ArgumentRole::Step},
      {"loss_scale", ArgumentRole::LossScale}};
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
                           "step or loss_scale");
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
      TRELLIS_RETURN_IF_ERROR(readGlobalShape(entry["global_shape"], where,
                                              argument));
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
        return Status::error(where + ": the " +
                             (argument.role == ArgumentRole::Step
                                  ? "step"
                                  : "loss scale") +
                             " must be a scalar f32 buffer");
      break;
    default:
      if (argument.role == ArgumentRole::Param
              ? desc.dtype == DType::I32
              : desc.dtype != DType::F32)
        return Status::error(
            where + (argument.role == ArgumentRole::Param
                         ? ": a parameter must be an f32, bf16 or f16 buffer"
                         : ": optimizer states and master weights must be "
                           "f32 buffers"));
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
  for (size_t s = 0; s < stages.size(); ++s)
    TRELLIS_RETURN_IF_ERROR(readStage(stages[s], static_cast<int64_t>(s)));
  // Transfers of micro-batches get a channel per micro-batch; those of the
  // step come after all of them.
  for (const std::vector<ActionProgramDesc> &programs : programs_)
    for (const ActionProgramDesc &program : programs)
      if (program.perMicroBatch())
        for (const Instruction &instruction : program.body.program)
          if (isPointToPoint(instruction.op))
            channels_ = std::max(channels_, instruction.integer("channel") + 1);
  for (size_t s = 0; s < stages.size(); ++s)
    TRELLIS_RETURN_IF_ERROR(expandStage(static_cast<int64_t>(s)));
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
  if (stage.contains("stage") &&
      (!stage["stage"].is_number_integer() ||
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
      return Status::error(prefix + "program " + programs[p].name + " runs " +
                           std::to_string(ran[p].size()) +
                           " times in the schedule, expected " +
                           std::to_string(expected) +
                           (programs[p].perMicroBatch()
                                ? " (once per micro-batch)"
                                : ""));
  }
  return Status::success();
}

Status PlanReader::checkActionProgram(const ActionProgramDesc &program,
                                      const std::string &where) {
  for (size_t i = 0; i < program.body.program.size(); ++i) {
    const Instruction &instruction = program.body.program[i];
    std::string at =
        where + " instruction " + std::to_string(i) + " (" + instruction.op + ")";
    if (!program.perMicroBatch()) {
      for (const std::vector<int64_t> *ids :
           {&instruction.inputs, &instruction.outputs})
        for (int64_t id : *ids)
          if (perMicroBatch_[id])
            return Status::error(at + ": buffer " + std::to_string(id) +
                                 " holds one micro-batch's value, but the "
                                 "step program runs once per step");
      if (instruction.op == "accumulate")
        return Status::error(at + ": accumulate adds a micro-batch's value "
                                  "to the step's: expected it in a program "
                                  "of the micro-batch");
      continue;
    }
    if (instruction.op != "accumulate") {
      for (int64_t id : instruction.outputs)
        if (!perMicroBatch_[id])
          return Status::error(at + ": writes buffer " + std::to_string(id) +
                               ", a value of the step, in a program that "
                               "runs once per micro-batch");
      continue;
    }
    if (!perMicroBatch_[instruction.inputs[0]] ||
        perMicroBatch_[instruction.outputs[0]])
      return Status::error(at + ": expected a micro-batch's buffer in and a "
                                "step's buffer out, found buffers " +
                           std::to_string(instruction.inputs[0]) + " and " +
                           std::to_string(instruction.outputs[0]));
  }
  return Status::success();
}

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
          return program.perMicroBatch() ? plan * m + mb
                                         : channels_ * m + plan;
        };
        instruction.attrs["channel"].integer =
            channel(instruction.integer("channel"));
        if (instruction.attrs.count("complete_with"))
          instruction.attrs["complete_with"].integer =
              channel(instruction.integer("complete_with"));
      }
      if (instruction.op == "accumulate") {
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

Status PlanReader::readInstructions(const json &program,
                                    const std::string &where,
                                    StageProgram &stage) {
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
    stage.program.push_back(std::move(instruction));
    stage.instructionAxes.push_back(std::move(axes));
  }
  return Status::success();
}

/// A send's `complete_with` names a later receive from the same peer (in
/// the program the stage runs, after expansion).
Status PlanReader::checkCompletions(int64_t index) {
  const StageProgram &stage = plan_.stages[index];
  for (size_t i = 0; i < stage.program.size(); ++i) {
    const Instruction &send = stage.program[i];
    if (send.op != "send" || !send.attrs.count("complete_with"))
      continue;
    bool found = false;
    for (size_t j = i + 1; j < stage.program.size() && !found; ++j)
      found = stage.program[j].op == "recv" &&
              stage.program[j].integer("channel") ==
                  send.integer("complete_with") &&
              stage.program[j].integer("peer") == send.integer("peer") &&
              stage.instructionAxes[j] == stage.instructionAxes[i];
    if (!found)
      return Status::error(
          "stage " + std::to_string(index) + " instruction " +
          std::to_string(i) + " (send): complete_with names channel " +
          std::to_string(send.integer("complete_with")) +
          ", but no later recv from the same peer uses it");
  }
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
      return Status::error(where + ": buffer " +
                           std::to_string(result.buffer) +
                           " holds one micro-batch's value; results are the "
                           "step's");
    result.isLoss = entry.value("role", "") == "loss";
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

/// In each stage, every buffer is defined once (as an argument the stage
/// holds or an instruction output) before any instruction reads it.
Status PlanReader::checkDataflow(int64_t stage) {
  plan_.stage = stage;
  std::string prefix =
      plan_.stages.size() > 1 ? "stage " + std::to_string(stage) + ": " : "";
  std::vector<bool> defined(plan_.buffers.size(), false);
  for (const Argument &argument : plan_.arguments) {
    if (!plan_.holds(argument.stages))
      continue;
    if (defined[argument.buffer])
      return Status::error("buffer " + std::to_string(argument.buffer) +
                           " is bound to two arguments");
    defined[argument.buffer] = true;
  }
  const StageProgram &expanded = plan_.stages[stage];
  const std::vector<Instruction> &program = expanded.program;
  size_t action = 0;
  for (size_t i = 0; i < program.size(); ++i) {
    const Instruction &instruction = program[i];
    // Name the action and its program's instruction.
    while (action + 1 < expanded.actions.size() &&
           static_cast<int64_t>(i) >= expanded.actions[action].first +
                                          expanded.actions[action].count)
      ++action;
    auto where = [&] {
      // A lone step program has no action spans.
      ActionSpan span{"step", 0, static_cast<int64_t>(program.size())};
      if (!expanded.actions.empty())
        span = expanded.actions[action];
      return prefix + "action " + span.name + " instruction " +
             std::to_string(i - span.first) + " (" + instruction.op + ")";
    };
    for (int64_t input : instruction.inputs)
      if (!defined[input])
        return Status::error(where() + " reads buffer " +
                             std::to_string(input) + " before it is written");
    for (int64_t output : instruction.outputs) {
      // Accumulators take every micro-batch's value.
      if (instruction.op == "accumulate")
        continue;
      if (defined[output])
        return Status::error(where() + " writes buffer " +
                             std::to_string(output) +
                             ", which is already defined");
      defined[output] = true;
    }
    if (instruction.op == "accumulate")
      defined[instruction.outputs[0]] = true;
  }
  for (const Result &result : plan_.results)
    if (plan_.holds(result.stages) && !defined[result.buffer])
      return Status::error(prefix + "result buffer " +
                           std::to_string(result.buffer) + " is never written");
  return Status::success();
}

StatusOr<Plan> PlanReader::read(const json &root) {
  if (!root.is_object())
    return Status::error("expected a JSON object at the top level");
  if (root.value("format", "") != "trellis-plan")
    return Status::error("expected \"format\": \"trellis-plan\", found " +
                         (root.contains("format") ? describe(root["format"])
                                                  : std::string("none")));
  TRELLIS_RETURN_IF_ERROR(requireKind(
      root, "version", json::value_t::number_integer, "an integer", "plan"));
  int64_t version = root["version"].get<int64_t>();
  if (version != kPlanVersion)
    return Status::error("unsupported plan version " + std::to_string(version) +
                         " (this runtime reads version " +
                         std::to_string(kPlanVersion) + ")");
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
  // Arguments name stages by index: their count first, programs after.
  plan_.stages.resize(root["stages"].size());
  TRELLIS_RETURN_IF_ERROR(readArguments(root["arguments"]));
  TRELLIS_RETURN_IF_ERROR(readProgram(root["stages"]));
  TRELLIS_RETURN_IF_ERROR(readResults(root["results"]));
  if (!plan_.holds(plan_.results[0].stages) ||
      plan_.results[0].stages.size() > 1)
    return Status::error("expected the loss on stage 0 alone (it reports "
                         "the loss)");
  expandInputs();
  for (size_t stage = 0; stage < plan_.stages.size(); ++stage) {
    TRELLIS_RETURN_IF_ERROR(checkDataflow(stage));
    TRELLIS_RETURN_IF_ERROR(checkCompletions(stage));
  }
  selectStage(plan_, 0);
  return std::move(plan_);
}

} // namespace

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

void selectStage(Plan &plan, int64_t stage) {
  plan.stage = stage;
  plan.program = plan.stages[stage].program;
  plan.instructionAxes = plan.stages[stage].instructionAxes;
  plan.actions = plan.stages[stage].actions;
}

StatusOr<Plan> parsePlan(std::string_view text) {
  json root = json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded())
    return Status::error("malformed plan: not valid JSON (truncated or "
                         "corrupted file?)");
  StatusOr<Plan> plan = PlanReader().read(root);
  if (!plan.ok())
    return plan.status().withContext("invalid plan");
  return plan;
}

Status verifyPlanChecksum(const std::string &text) {
  static const std::string prefix = "{\"checksum\":\"crc32:";
  if (text.compare(0, prefix.size(), prefix) != 0)
    return Status::success(); // written by hand, or before checksums
  size_t digits = prefix.size();
  if (text.size() < digits + 10 || text.compare(digits + 8, 2, "\",") != 0)
    return Status::error("corrupt plan: malformed checksum field");
  std::string expected = text.substr(digits, 8);
  char *end = nullptr;
  unsigned long stated = std::strtoul(expected.c_str(), &end, 16);
  if (*end != '\0')
    return Status::error("corrupt plan: malformed checksum '" + expected + "'");
  // The checksum covers the plan as written without its checksum field.
  std::string content = "{" + text.substr(digits + 10);
  while (!content.empty() && (content.back() == '\n' || content.back() == ' '))
    content.pop_back();
  uLong found = crc32(0L, Z_NULL, 0);
  found = crc32(found, reinterpret_cast<const Bytef *>(content.data()),
                static_cast<uInt>(content.size()));
  if (found != stated) {
    char text[16];
    std::snprintf(text, sizeof(text), "%08lx", static_cast<unsigned long>(found));
    return Status::error("corrupt plan: its checksum says crc32 " + expected +
                         ", its content has " + text +
                         " (the file changed after trellis compile wrote it)");
  }
  return Status::success();
}

StatusOr<Plan> loadPlanText(const std::string &contents) {
  TRELLIS_RETURN_IF_ERROR(verifyPlanChecksum(contents));
  StatusOr<Plan> plan = parsePlan(contents);
  if (!plan.ok())
    return plan.status();
  plan->contentCrc32 = static_cast<uint32_t>(
      crc32_z(crc32(0L, Z_NULL, 0),
              reinterpret_cast<const Bytef *>(contents.data()),
              contents.size()));
  return plan;
}

StatusOr<Plan> loadPlanFile(const std::string &path) {
  std::string contents;
  if (std::string why = readRegularFile(path, contents); !why.empty())
    return Status::error("cannot open plan '" + path + "': it " + why +
                         ", expected a plan file (trellis compile -o)");
  StatusOr<Plan> plan = loadPlanText(contents);
  if (!plan.ok())
    return plan.status().withContext(path);
  return plan;
}

} // namespace trellis::runtime
