//===- Plan.h - The plan file, loaded and validated -------------*- C++ -*-===//
//
// The runtime's view of a plan (docs/PlanFormat.md). parsePlan treats its
// input as untrusted: every id, shape, attribute and role is checked, so
// that executing a plan that loaded can fail only on data (a token out of
// range), never on memory safety.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_PLAN_H
#define TRELLIS_RUNTIME_PLAN_H

#include "trellis/Common/LearningRate.h"
#include "trellis/Common/MemoryPlan.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Common/OpContract.h"
#include "trellis/Common/StepMetric.h"
#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::runtime {

/// Element types of plan buffers (the op contract's). Every op's accepted
/// dtypes are checked when a plan loads.
using DType = ElementType;

const char *dtypeName(DType dtype);

/// The dtype named `name` ("f32", "bf16", "f16", "i32").
std::optional<DType> parseDType(const std::string &name);

/// Bytes of one element.
int64_t dtypeBytes(DType dtype);

struct BufferDesc {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int64_t numElements() const;
};

/// Mesh axes by index, in the order a plan lists them.
using AxisList = std::vector<size_t>;

/// A value an attribute of an instruction can hold (the op contract's).
using AttrValue = trellis::AttrValue;

struct Instruction {
  std::string op;
  std::vector<int64_t> inputs;
  std::vector<int64_t> outputs;
  std::map<std::string, AttrValue> attrs;
  /// The op's row of the op table, found once when the plan loads: kernels
  /// read their family, member and facts from it. Null for an instruction
  /// made elsewhere (tests, calibration), whose row() looks the op up.
  const OpContract *contract = nullptr;

  /// The attributes as the op's row decodes them (OpParameters.h), set
  /// with `contract` by resolve(): what kernels read. Null until then.
  std::shared_ptr<const OpParameters> parameters;

  /// The parameters as `P`, their family's struct; null when the
  /// instruction is unresolved or of a family with another struct.
  template <typename P> const P *parametersAs() const {
    return parameters ? std::get_if<P>(parameters.get()) : nullptr;
  }

  /// The op's row; only for ops of the table (validation admits no other).
  const OpContract &row() const {
    return contract ? *contract : *findOpContract(op);
  }
  /// Finds the op's row and decodes the attributes into `parameters`
  /// (again after either changed). Precondition: the row validated them;
  /// an op outside the table keeps both null.
  void resolve();

  /// Typed attribute access; validation has established presence and kind
  /// of required attributes, so these return `fallback` only for optional
  /// ones.
  bool flag(const std::string &name, bool fallback = false) const;
  int64_t integer(const std::string &name, int64_t fallback = 0) const;
  double real(const std::string &name, double fallback = 0) const;
  const std::vector<int64_t> &ints(const std::string &name) const;
  const std::vector<double> &reals(const std::string &name) const;
  const std::string &text(const std::string &name) const;
  const std::vector<std::string> &texts(const std::string &name) const;
};

/// `Param`: a parameter, in f32 or (mixed precision) the compute dtype.
/// `State`: an f32 tensor the model reads and no gradient trains (a
/// persistent buffer: DeepSeek-V3's e_score_correction_bias); initialized,
/// loaded, saved and exported under its name as parameters are.
/// `Master`: the f32 master weight of a 16-bit parameter of the same name,
/// which the optimizer updates. `LossScale`: the scalar f32 the loss is
/// multiplied by before the backward (fp16 mixed precision); the runtime
/// sets it every step.
enum class ArgumentRole {
  Param,
  Input,
  AdamM,
  AdamV,
  Master,
  Step,
  LossScale,
  State
};

struct Argument {
  int64_t buffer = 0;
  ArgumentRole role = ArgumentRole::Param;
  /// The parameter (or input) name; optimizer states carry their parameter's.
  std::string name;
  /// "normal:<std>", "zeros", "ones" or empty (inputs, step).
  std::string init;
  /// Per dimension, the mesh axes (indices) it is split over; empty when the
  /// argument is replicated. The buffer holds this rank's shard.
  std::vector<std::vector<size_t>> sharding;
  /// The shape checkpoints store the whole tensor under, when it differs
  /// from the whole tensor's shape (same row-major elements); else empty.
  std::vector<int64_t> fileShape;
  /// The whole tensor's shape when a split does not divide it (each
  /// rank's piece rounds up, the last pieces padded with zeros); else
  /// empty: the buffer's shape times the ranks of each split.
  std::vector<int64_t> globalShape;
  /// The pipeline stages that hold it; empty: every stage.
  std::vector<int64_t> stages;
  /// Inputs: the batch stores the sequence (dimension 1) in zigzag order
  /// of this many chunks (trellis/Common/SequenceChunks.h); 0: natural
  /// order.
  int64_t sequenceChunks = 0;
};

struct Result {
  int64_t buffer = 0;
  bool isLoss = false;
  /// Argument index this result replaces after a step, if any.
  std::optional<int64_t> updates;
  /// Argument index whose gradient this result is, if any.
  std::optional<int64_t> gradientOf;
  /// The name of a figure of the step, or empty: "grad_norm" (the global
  /// gradient norm before clipping), "expert_load", "update_guard" (the
  /// f32 scalar the step's updates are guarded by: 0 when they applied,
  /// NaN when every update left its values unchanged)...
  std::string metric;
  /// How the runtime reports the metric after each step (the pass that
  /// makes it declares it; trellis/Common/StepMetric.h); none: not
  /// reported.
  struct Report {
    std::string label;
    MetricSummary summary = MetricSummary::Value;
  };
  std::optional<Report> report;
  /// The pipeline stages that produce it; empty: every stage.
  std::vector<int64_t> stages;
};

/// One action program of a stage (`forward.c0`, `backward_receive.c1`,
/// `step`) as the plan file has it: its instructions name the buffers of
/// micro-batch 0, and each scheduled run binds them to its micro-batch's
/// (Plan::bindings). `instructionAxes` are the resolved mesh axes of each
/// instruction's "axes" attribute (empty for the others).
struct ActionProgram {
  std::string name;
  std::vector<Instruction> instructions;
  std::vector<AxisList> instructionAxes;
};

/// One run of an action program in a stage's schedule.
struct ScheduledAction {
  /// Index into StageProgram::programs.
  int64_t program = 0;
  /// The micro-batch whose buffers it binds; -1 for the step program.
  int64_t microBatch = -1;
  /// The schedule's name of the run (`F3`, `B3.c1`, `step`), for traces
  /// and messages.
  std::string name;
  /// The program's instructions whose attributes differ in this run, by
  /// index, whole (ascending): a transfer's channel (one per micro-batch),
  /// and `first` of an accumulate that is the step's first into its total.
  /// Amendments change only what a launch reads when it runs, never what
  /// a device prepares.
  std::vector<std::pair<size_t, Instruction>> amended;

  /// The instruction this run executes at `index` of `program`.
  const Instruction &instruction(const ActionProgram &program,
                                 size_t index) const;
};

/// What a stage runs in one step: its schedule's actions in order, each an
/// action program replayed over the buffers of its micro-batch. The
/// programs are kept once, not unrolled per micro-batch.
struct StageProgram {
  std::vector<ActionProgram> programs;
  std::vector<ScheduledAction> schedule;
  /// A forward-only run of the step, for evaluation: some entries of
  /// `schedule` (its forward actions and their receives), then some
  /// instructions of the step program (those the loss depends on). It
  /// runs the training step's instructions in their order, over the same
  /// buffers, so the step's memory plan holds for it.
  struct Evaluation {
    /// Indices into `schedule`, ascending.
    std::vector<size_t> actions;
    /// Indices into the step program's instructions, ascending.
    std::vector<size_t> stepInstructions;
  };
  /// Absent in a plan written without one.
  std::optional<Evaluation> evaluation;
  /// The most micro-batches whose values are alive at once (from the first
  /// to the last action of each in the schedule): 1F1B keeps at most the
  /// pipeline depth on the first stage, GPipe every micro-batch.
  int64_t liveMicroBatches = 1;
  /// Per entry of the stage's timeline (stageTimeline): where a send
  /// completes, as planSendCompletions proves it from every stage's
  /// timeline (the first position at which its peer is known to have
  /// received it), else -1 (the end of the step). Empty without a pipeline.
  std::vector<int64_t> sendCompletions;
};

struct Plan {
  std::string metadataJson;
  /// CRC-32 of the plan file's bytes as loaded (0 for a plan parsed from
  /// text): the identity ranks compare at rendezvous.
  uint32_t contentCrc32 = 0;
  /// Micro-batches per step: each input argument is one micro-batch's
  /// (`tokens.<i>`, `targets.<i>` when several).
  int64_t microBatches = 1;
  std::vector<MeshAxis> mesh;
  /// The plan file's buffers, then one copy of each buffer of a
  /// micro-batch for every micro-batch after the first.
  std::vector<BufferDesc> buffers;
  /// With several micro-batches, per micro-batch: for each buffer id of the
  /// plan file, the buffer that holds its value in that micro-batch (the
  /// id itself for micro-batch 0 and for the step's buffers). Empty with
  /// one micro-batch.
  std::vector<std::vector<int64_t>> bindings;
  std::vector<Argument> arguments;
  std::vector<Result> results;
  /// Every stage's program, in stage order (one without a pipeline). A
  /// trainer keeps only the number of stages once it selected its own.
  std::vector<StageProgram> stages;
  /// The mesh axis whose coordinate is a rank's stage (with several).
  std::optional<size_t> pipelineAxis;
  /// The stage this rank runs.
  int64_t stage = 0;

  /// The selected stage's program.
  const StageProgram &stageProgram() const { return stages[stage]; }
  /// The buffer holding plan-file buffer `id`'s value in `microBatch` (-1:
  /// the step's).
  int64_t bufferOf(int64_t id, int64_t microBatch) const {
    return microBatch < 0 || bindings.empty() ? id : bindings[microBatch][id];
  }

  /// Whether the selected stage holds an argument or result with `stages`.
  bool holds(const std::vector<int64_t> &stages) const;

  /// Index of the argument with `role` and `name`, or -1.
  int64_t findArgument(ArgumentRole role, const std::string &name) const;
  /// A metadata integer (e.g. "vocab_size"), or `fallback`.
  int64_t metadataInteger(const std::string &key, int64_t fallback) const;
  /// A metadata string (e.g. "precision"), or `fallback`.
  std::string metadataText(const std::string &key,
                           const std::string &fallback) const;
  /// The learning-rate schedule the metadata's optimizer names
  /// (`lr_schedule`), or nullopt for a constant rate.
  std::optional<LrSchedule> learningRateSchedule() const;
  /// The index of the "update_guard" result, or -1 when the updates are
  /// not guarded: then a step can only be dropped by not committing its
  /// updates.
  int64_t updateGuardResult() const;
};

/// The name of an input argument: its data stream ("tokens" or "targets")
/// and micro-batch (-1 for `tokens`, i for `tokens.<i>`).
struct InputName {
  std::string stream;
  int64_t microBatch = -1;
};

/// Parses `tokens`, `targets`, or either followed by `.<micro-batch>` (up
/// to 6 digits); nullopt for any other name.
std::optional<InputName> parseInputName(const std::string &name);

/// The mesh of `plan` (validated when the plan loaded).
Mesh planMesh(const Plan &plan);

/// The stage `rank` runs: its coordinate along the pipeline axis (0
/// without one).
int64_t stageOfRank(const Plan &plan, int64_t rank);

/// Makes `stage` the one the plan's rank runs.
void selectStage(Plan &plan, int64_t stage);

/// One instruction of a stage's step in the order it runs: the action it
/// belongs to, its index in the action's program, and its buffers bound to
/// the action's micro-batch. The timeline indexes a step for the memory
/// plan and checks; the executor runs the programs themselves.
struct TimelineEntry {
  /// Index into StageProgram::schedule.
  size_t action = 0;
  /// Index into the action's program.
  size_t index = 0;
  /// The instruction as the run executes it (amendments applied); its
  /// buffer ids are the plan file's.
  const Instruction *instruction = nullptr;
  const AxisList *axes = nullptr;
  /// The buffers it reads and writes in this run.
  std::vector<int64_t> inputs, outputs;
};

/// `stage`'s step, instruction by instruction.
std::vector<TimelineEntry> stageTimeline(const Plan &plan, int64_t stage);

/// A timeline as the memory plan sees it (planStepMemory), with the
/// stage's send completions.
std::vector<PlannedInstruction>
plannedTimeline(const Plan &plan, int64_t stage,
                const std::vector<TimelineEntry> &timeline);

/// One direction of a plan's point-to-point traffic: rank `from` sends
/// values to rank `to` (transferLinks in Plan.h). Every rank of a job is
/// given the same links, sorted; a backend that matches a pair's transfers
/// in order (NCCL) connects each link apart, so traffic one way never
/// waits behind traffic the other.
struct TransferLink {
  int64_t from = 0, to = 0;
  bool operator==(const TransferLink &other) const {
    return from == other.from && to == other.to;
  }
  bool operator<(const TransferLink &other) const {
    return from != other.from ? from < other.from : to < other.to;
  }
};

/// Every rank's point-to-point links: (sender, receiver) of each send of
/// each rank's stage, the receiver found along the send's axes; sorted,
/// each once. Every rank computes the same list.
std::vector<TransferLink> transferLinks(const Plan &plan);

/// Fills every stage's `sendCompletions` from all stages' timelines.
void planSendCompletions(Plan &plan);

/// Per entry of stageTimeline(plan, stage): whether the stage's
/// evaluation runs it (empty when the plan has no evaluation).
std::vector<bool> evaluationMask(const Plan &plan, int64_t stage);

/// Parses and validates plan text.
StatusOr<Plan> parsePlan(std::string_view text);

/// A plan written by trellis compile opens with `{"checksum":"crc32:H",`:
/// the CRC-32 (8 hex digits) of the plan text without that field. Fails,
/// saying "corrupt plan", when the content does not match; a plan without
/// the field (written by hand) passes.
Status verifyPlanChecksum(const std::string &text);

/// Verifies the checksum of plan text and parses it (the plan's
/// contentCrc32 is that of the whole text).
StatusOr<Plan> loadPlanText(const std::string &text);

/// The largest plan file read: the largest plans compiled (Llama-3.1-405B
/// at pp=16, dp=16, tp=8 with 128 micro-batches in two chunks a stage) are
/// 3.4 MiB; their programs are written once per action, so plans grow with
/// neither the mesh nor the micro-batches.
constexpr int64_t kMaxPlanFileBytes = int64_t(64) << 20;

/// Reads a plan file of at most kMaxPlanFileBytes, verifies its checksum,
/// parses it.
StatusOr<Plan> loadPlanFile(const std::string &path);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_PLAN_H
