//===- PlanReader.h - Reading a plan file into a Plan -----------*- C++ -*-===//
//
// The plan loader's one class, its methods in four files by purpose:
// PlanReader.cpp reads and checks fields, PlanChecks.cpp checks scopes and
// dataflow, PlanBinding.cpp binds each stage's scheduled actions to their
// micro-batches' buffers, PlanFile.cpp reads files and checksums.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_LIB_PLAN_PLANREADER_H
#define TRELLIS_RUNTIME_LIB_PLAN_PLANREADER_H

#include "trellis/Common/ActionNames.h"
#include "trellis/Runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace trellis::runtime::planreader {

using json = nlohmann::json;

/// Whether `instruction` adds a micro-batch's value into a step total (the
/// op table's effects).
inline bool accumulates(const Instruction &instruction) {
  const OpContract *contract = findOpContract(instruction.op);
  return contract && contract->effects.accumulates;
}

/// An attribute of an instruction in the plan file.
StatusOr<AttrValue> readAttr(const json &value, const std::string &where);

/// Largest buffer the runtime accepts: 2^36 elements (256 GiB of f32).
constexpr int64_t kMaxElements = int64_t(1) << 36;
constexpr size_t kMaxRank = 8;
/// Model chunks per stage and micro-batches per step the runtime accepts.
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kMaxMicroBatches = int64_t(1) << 20;

inline std::string describe(const json &value) {
  std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

/// An action program of a stage as the plan file has it.
struct ActionProgramDesc : ActionProgramName {
  std::string name;
  ActionProgram body;
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
                          ActionProgram &into);
  /// One stage's action programs and schedule.
  Status readStage(const json &stage, int64_t index);
  /// Checks the scopes of an action program's buffers (a micro-batch's
  /// values only in the micro-batch's programs; accumulate from one to the
  /// step).
  Status checkActionProgram(const ActionProgramDesc &program,
                            const std::string &where);
  /// A stage's programs and its schedule's runs of them, each bound to its
  /// micro-batch's buffers (copies made here).
  Status bindStage(int64_t index);
  /// Plan::bindings, from the copies every stage made.
  void bindMicroBatches(size_t fileBuffers);
  /// Each micro-batch's input buffers as arguments of their own.
  void expandInputs();
  /// The buffer that holds `buffer`'s value for `microBatch` (per-micro-
  /// batch buffers have one copy per micro-batch; micro-batch 0 keeps the
  /// plan's id).
  int64_t bufferFor(int64_t buffer, int64_t microBatch);
  /// A stage's "evaluation": forward actions of its schedule, in its
  /// order, and instructions of its step program, ascending.
  Status readEvaluation(const json &stage, int64_t index,
                        const std::string &prefix);
  Status readStageList(const json &entry, const std::string &where,
                       std::vector<int64_t> &stages) const;
  Status readResults(const json &array);
  /// The "report" of result entry `entry` (a metric's: its label and a
  /// summary its buffer's shape allows) into `result`.
  Status readMetricReport(const json &entry, const std::string &where,
                          Result &result) const;
  /// metadata.vocab_size, when given: an integer the losses' class
  /// dimensions agree with (split losses: each rank's piece).
  Status checkVocabulary() const;
  /// Every buffer `stage` reads is written before (or an argument the
  /// stage holds); with `evaluation`, in the instructions its evaluation
  /// runs, which must write the loss where the stage holds it.
  Status checkDataflow(int64_t stage, bool evaluation = false);
  /// Every send is received once, by the stage it names, on its channel,
  /// into a buffer of its type; and between two stages, in the order it
  /// was sent (NCCL matches a pair's transfers in order, as MPI does).
  Status checkTransfers();

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
  /// Per stage: its action programs and schedule, before binding.
  std::vector<std::vector<ActionProgramDesc>> programs_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> schedules_;
  /// Per stage: its evaluation, if the plan has one.
  std::vector<std::optional<StageProgram::Evaluation>> evaluations_;
  /// Copies of per-micro-batch buffers, by (buffer, micro-batch >= 1).
  std::map<std::pair<int64_t, int64_t>, int64_t> copies_;
  /// Channels of the micro-batches' transfers: [0, channels_) per
  /// micro-batch.
  int64_t channels_ = 0;
};

} // namespace trellis::runtime::planreader

#endif // TRELLIS_RUNTIME_LIB_PLAN_PLANREADER_H
