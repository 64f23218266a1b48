//===- PlanEmitter.cpp - Training step to plan file -----------------------===//

#include "trellis/Target/Plan/PlanEmitter.h"

#include "trellis/Common/ActionNames.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Pipeline/PipelineSplit.h"

#include <deque>

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

/// Entries of a JSON array being built. llvm::json::Value's move is not
/// noexcept, so a growing json::Array copies every element it holds at
/// each reallocation; entries wait in a deque and move into an array of
/// the right size once (toArray).
using JsonEntries = std::deque<llvm::json::Object>;

llvm::json::Array toArray(JsonEntries entries) {
  llvm::json::Array array;
  array.reserve(entries.size());
  for (llvm::json::Object &entry : entries)
    array.push_back(std::move(entry));
  return array;
}

llvm::json::Array shapeArray(ArrayRef<int64_t> shape) {
  llvm::json::Array array;
  for (int64_t size : shape)
    array.push_back(size);
  return array;
}

/// The ops of a step program that `loss` depends on, not following values
/// that ops outside it (`inProgram` false) or arguments make, nor through
/// a micro-batch's sum (the forward's accumulate). A receive is followed to
/// the send of its channel (`sendOf`) on another stage.
DenseSet<Operation *>
lossSlice(ArrayRef<Value> losses, function_ref<bool(Operation *)> inProgram,
          const DenseMap<int64_t, trellis::SendOp> &sendOf) {
  DenseSet<Operation *> selected;
  SmallVector<Value> work(losses.begin(), losses.end());
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !inProgram(op) || !selected.insert(op).second)
      continue;
    llvm::append_range(work, op->getOperands());
    if (auto recv = llvm::dyn_cast<trellis::RecvOp>(op))
      if (trellis::SendOp send = sendOf.lookup(recv.getChannel());
          send && inProgram(send) && selected.insert(send).second)
        work.push_back(send.getInput());
  }
  return selected;
}

/// A stage's "evaluation": its schedule's forward actions (and their
/// receives), then the step program's instructions at `stepInstructions`.
llvm::json::Object evaluationEntry(ArrayRef<std::string> schedule,
                                   SmallVector<int64_t> stepInstructions) {
  llvm::json::Array actions;
  for (const std::string &name : schedule)
    if (std::optional<ScheduledActionName> parsed = parseActionName(name);
        parsed && parsed->program.kind == ActionKind::Forward)
      actions.push_back(name);
  llvm::sort(stepInstructions);
  llvm::json::Array instructions;
  for (int64_t index : stepInstructions)
    instructions.push_back(index);
  return llvm::json::Object{{"actions", std::move(actions)},
                            {"step_instructions", std::move(instructions)}};
}

/// The plan's name of a tensor element type, or empty if unsupported.
StringRef dtypeName(Type type) {
  std::optional<trellis::ElementType> element = toElementType(type);
  return element ? trellis::elementTypeName(*element) : "";
}

/// An attribute as the plan holds it: the op contract's value
/// (toContractAttr), or a collective's reduction kind; nullopt if it has no
/// plan form.
std::optional<llvm::json::Value> attributeToJson(Attribute attr) {
  if (auto kind = llvm::dyn_cast<ReductionKindAttr>(attr))
    return llvm::json::Value(stringifyReductionKind(kind.getValue()).str());
  std::optional<trellis::AttrValue> value = toContractAttr(attr);
  if (!value)
    return std::nullopt;
  switch (value->kind) {
  case AttrKind::Bool:
    return llvm::json::Value(value->flag);
  case AttrKind::Int:
    return llvm::json::Value(value->integer);
  case AttrKind::Real:
    return llvm::json::Value(value->real);
  case AttrKind::Ints:
    return llvm::json::Value(shapeArray(value->ints));
  case AttrKind::Reals: {
    llvm::json::Array array;
    for (double real : value->reals)
      array.push_back(real);
    return llvm::json::Value(std::move(array));
  }
  case AttrKind::String:
    return llvm::json::Value(value->text);
  case AttrKind::Strings: {
    llvm::json::Array names;
    for (const std::string &name : value->texts)
      names.push_back(name);
    return llvm::json::Value(std::move(names));
  }
  }
  return std::nullopt;
}

class Emitter {
public:
  /// A plan of one step program.
  FailureOr<llvm::json::Value> emit(func::FuncOp step, PlanMetadata metadata);
  /// A plan of per-stage action programs (`stages`, in stage order).
  FailureOr<llvm::json::Value> emitStages(SmallVector<func::FuncOp> stages,
                                          PlanMetadata metadata);

private:
  /// The instruction of `op` (its results get buffers on first sight).
  FailureOr<llvm::json::Object> emitInstruction(Operation &op);

  /// The mesh every sharding and collective of `function` uses (a plan runs
  /// on one mesh), or none for a single-device program.
  FailureOr<MeshOp> findMesh(func::FuncOp function);
  /// Uses of a mesh must name the plan's mesh; with a pipeline, the
  /// step's mesh may be named too (its axes are the pipeline mesh's).
  LogicalResult checkMesh(Operation *where, FlatSymbolRefAttr name);
  /// The plan's mesh axes.
  llvm::json::Array meshArray();

  /// Assigns a buffer to `value` (once); `perMicroBatch` marks it as one
  /// micro-batch's (each micro-batch the schedule runs has its own copy).
  FailureOr<int64_t> defineBuffer(Value value, Operation *where,
                                  bool perMicroBatch = false);
  /// Whether `op`'s results are values of one micro-batch in a plan of
  /// action programs.
  bool makesMicroBatchValues(Operation &op) const {
    return staged_ && !makesStepTotal(&op) &&
           op.hasAttr(GraphDialect::kPhaseAttrName);
  }
  /// The plan's entry for argument `index` of `function`.
  FailureOr<llvm::json::Object> emitArgument(func::FuncOp function,
                                             unsigned index);
  /// The plan's entry for result `index` of `function` (buffer `buffer`).
  llvm::json::Object emitResult(func::FuncOp function, unsigned index,
                                int64_t buffer);

  DenseMap<Value, int64_t> bufferIds_;
  JsonEntries buffers_;
  MeshOp mesh_;
  /// With a pipeline: the step's own mesh, whose axes @pipeline has too.
  MeshOp stepMesh_;
  bool staged_ = false;
};

LogicalResult Emitter::checkMesh(Operation *where, FlatSymbolRefAttr name) {
  if (mesh_ && stepMesh_ && stepMesh_.getSymName() == name.getValue())
    return success();
  if (!mesh_)
    mesh_ = lookupMesh(where, name, [&] { return where->emitError(); });
  if (!mesh_)
    return failure();
  if (mesh_.getSymName() != name.getValue())
    return where->emitError() << "a plan runs on one mesh: found @"
                              << mesh_.getSymName() << " and " << name;
  return success();
}

FailureOr<MeshOp> Emitter::findMesh(func::FuncOp function) {
  for (unsigned i = 0; i < function.getNumArguments(); ++i)
    if (auto sharding = function.getArgAttrOfType<ShardingAttr>(
            i, TrellisDialect::kShardingAttrName))
      if (failed(checkMesh(function, sharding.getMeshName())))
        return failure();
  WalkResult walk = function.walk([&](Operation *op) {
    if (auto mesh = op->getAttrOfType<FlatSymbolRefAttr>("mesh"))
      if (failed(checkMesh(op, mesh)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return mesh_;
}

llvm::json::Array Emitter::meshArray() {
  llvm::json::Array mesh;
  if (!mesh_) {
    mesh.push_back(llvm::json::Object{{"name", "dp"}, {"size", 1}});
    return mesh;
  }
  for (MeshAxisAttr axis : mesh_.getMesh().getAxes())
    mesh.push_back(llvm::json::Object{{"name", axis.getName().str()},
                                      {"size", axis.getSize()}});
  return mesh;
}

FailureOr<int64_t> Emitter::defineBuffer(Value value, Operation *where,
                                         bool perMicroBatch) {
  if (auto known = bufferIds_.find(value); known != bufferIds_.end())
    return known->second;
  auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
  StringRef dtype = type ? dtypeName(type.getElementType()) : "";
  if (!type || !type.hasStaticShape() || dtype.empty())
    return where->emitError() << "the plan holds static tensors of f32, bf16, "
                                 "f16 or i32,"
                              << " found " << value.getType();
  int64_t id = buffers_.size();
  llvm::json::Object desc{{"shape", shapeArray(type.getShape())},
                          {"dtype", dtype}};
  if (perMicroBatch)
    desc["micro_batch"] = true;
  buffers_.push_back(std::move(desc));
  bufferIds_[value] = id;
  return id;
}

FailureOr<llvm::json::Object> Emitter::emitInstruction(Operation &op) {
  if (llvm::isa<ShardOp>(op))
    return op.emitError() << "sharding annotations remain: partition the "
                             "program before emitting a plan";
  if (!llvm::isa<GraphDialect, TrellisDialect>(op.getDialect()))
    return op.emitError() << "the plan executes graph and trellis ops, "
                             "found '"
                          << op.getName() << "'";
  llvm::json::Array inputs, outputs;
  for (Value operand : op.getOperands())
    inputs.push_back(bufferIds_.lookup(operand));
  for (Value result : op.getResults()) {
    FailureOr<int64_t> id = defineBuffer(result, &op, makesMicroBatchValues(op));
    if (failed(id))
      return failure();
    outputs.push_back(*id);
  }
  // A micro-batch's value added to its step total.
  if (llvm::isa<MicrobatchSumOp>(op))
    return llvm::json::Object{{"op", "accumulate"},
                              {"inputs", std::move(inputs)},
                              {"outputs", std::move(outputs)}};
  llvm::json::Object attrs;
  auto inherent =
      llvm::dyn_cast_if_present<DictionaryAttr>(op.getPropertiesAsAttribute());
  for (NamedAttribute named :
       inherent ? inherent.getValue() : ArrayRef<NamedAttribute>()) {
    // The plan has one mesh: collectives need not name it.
    if (named.getName() == "mesh")
      continue;
    std::optional<llvm::json::Value> value = attributeToJson(named.getValue());
    if (!value)
      return op.emitError() << "attribute '" << named.getName().getValue()
                            << "' has no plan form";
    attrs[named.getName().getValue()] = std::move(*value);
  }
  llvm::json::Object instruction{{"op", op.getName().stripDialect().str()}};
  instruction["inputs"] = std::move(inputs);
  instruction["outputs"] = std::move(outputs);
  instruction["attrs"] = std::move(attrs);
  return instruction;
}

FailureOr<llvm::json::Object> Emitter::emitArgument(func::FuncOp function,
                                                    unsigned index) {
  BlockArgument arg = function.getArgument(index);
  auto role = function.getArgAttrOfType<StringAttr>(index,
                                                    GraphDialect::kRoleAttrName);
  // Inputs hold one micro-batch.
  FailureOr<int64_t> id = defineBuffer(
      arg, function, staged_ && role && role.getValue() == "input");
  if (failed(id))
    return failure();
  llvm::json::Object entry{{"buffer", *id}};
  for (StringRef key :
       {GraphDialect::kRoleAttrName, GraphDialect::kParamNameAttrName,
        GraphDialect::kInitAttrName}) {
    auto text = function.getArgAttrOfType<StringAttr>(index, key);
    if (text)
      entry[key.drop_front(strlen("graph."))] = text.getValue().str();
  }
  if (!entry.get("role"))
    return function.emitError() << "argument " << index << " has no graph.role";
  if (auto fileShape = function.getArgAttrOfType<DenseI64ArrayAttr>(
          index, GraphDialect::kFileShapeAttrName))
    entry["file_shape"] = shapeArray(fileShape.asArrayRef());
  if (auto sharding = function.getArgAttrOfType<ShardingAttr>(
          index, TrellisDialect::kShardingAttrName)) {
    if (!sharding.getPartialAxes().empty())
      return function.emitError() << "argument " << index
                                  << " is partial: a plan's arguments hold "
                                     "whole or split values";
    llvm::json::Array dims;
    for (DimShardingAttr dim : sharding.getDims()) {
      llvm::json::Array axes;
      for (StringAttr axis : dim.getAxes())
        axes.push_back(axis.getValue().str());
      dims.push_back(std::move(axes));
    }
    entry["sharding"] = std::move(dims);
  }
  // A split that does not divide: the whole tensor's shape, which the
  // padded pieces cover.
  if (auto padded = function.getArgAttrOfType<DenseI64ArrayAttr>(
          index, TrellisDialect::kPaddedAttrName))
    entry["global_shape"] = shapeArray(padded.asArrayRef());
  if (auto chunks = function.getArgAttrOfType<IntegerAttr>(
          index, TrellisDialect::kSequenceChunksAttrName))
    entry["sequence_chunks"] = chunks.getInt();
  return entry;
}

llvm::json::Object Emitter::emitResult(func::FuncOp function, unsigned index,
                                       int64_t buffer) {
  llvm::json::Object entry{{"buffer", buffer}};
  if (auto updates = function.getResultAttrOfType<IntegerAttr>(
          index, GraphDialect::kUpdatesAttrName))
    entry["updates"] = updates.getInt();
  else if (auto gradientOf = function.getResultAttrOfType<IntegerAttr>(
               index, "graph.gradient_of"))
    entry["gradient_of"] = gradientOf.getInt();
  if (auto metric = function.getResultAttrOfType<StringAttr>(
          index, GraphDialect::kMetricAttrName))
    entry["metric"] = metric.getValue().str();
  if (auto report = function.getResultAttrOfType<DictionaryAttr>(
          index, GraphDialect::kReportAttrName)) {
    llvm::json::Object fields;
    for (NamedAttribute field : report)
      if (auto text = llvm::dyn_cast<StringAttr>(field.getValue()))
        fields[field.getName().getValue()] = text.getValue().str();
    entry["report"] = std::move(fields);
  }
  return entry;
}

/// The top-level object of a plan; members are moved in one by one (an
/// initializer list would copy them).
llvm::json::Value planObject(int64_t microBatches, PlanMetadata metadata,
                             llvm::json::Array mesh, llvm::json::Array buffers,
                             llvm::json::Array arguments,
                             llvm::json::Array results,
                             llvm::json::Array stages) {
  llvm::json::Object plan{
      {"format", kPlanFormatName},
      {"version", kPlanFormatVersion},
      {"micro_batches", microBatches},
  };
  plan["metadata"] = std::move(metadata.fields);
  plan["mesh"] = std::move(mesh);
  plan["buffers"] = std::move(buffers);
  plan["arguments"] = std::move(arguments);
  plan["results"] = std::move(results);
  plan["stages"] = std::move(stages);
  return llvm::json::Value(std::move(plan));
}

FailureOr<llvm::json::Value> Emitter::emit(func::FuncOp step,
                                           PlanMetadata metadata) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  Block &body = step.getBody().front();
  if (failed(findMesh(step)))
    return failure();
  JsonEntries arguments;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    FailureOr<llvm::json::Object> entry = emitArgument(step, i);
    if (failed(entry))
      return failure();
    arguments.push_back(std::move(*entry));
  }
  // One program: the step of one micro-batch, whose totals are the
  // micro-batch's values themselves.
  JsonEntries program;
  DenseMap<Operation *, int64_t> instructionIndex;
  for (Operation &op : body.without_terminator()) {
    if (llvm::isa<MicrobatchSumOp>(op)) {
      bufferIds_[op.getResult(0)] = bufferIds_.lookup(op.getOperand(0));
      continue;
    }
    FailureOr<llvm::json::Object> instruction = emitInstruction(op);
    if (failed(instruction))
      return failure();
    instructionIndex[&op] = static_cast<int64_t>(program.size());
    program.push_back(std::move(*instruction));
  }
  llvm::json::Object stepProgram{{"name", "step"}};
  stepProgram["program"] = toArray(std::move(program));
  llvm::json::Array programs;
  programs.push_back(std::move(stepProgram));
  llvm::json::Object stage{{"stage", 0},
                           {"schedule", llvm::json::Array{"step"}}};
  stage["programs"] = std::move(programs);
  llvm::json::Array stages;
  stages.push_back(std::move(stage));

  JsonEntries results;
  Operation *terminator = body.getTerminator();
  for (auto [index, value] : llvm::enumerate(terminator->getOperands())) {
    auto it = bufferIds_.find(value);
    if (it == bufferIds_.end())
      return step.emitError("a result is not produced by the program");
    llvm::json::Object entry = emitResult(step, index, it->second);
    if (index == 0 && !entry.get("updates") && !entry.get("gradient_of")) {
      entry["role"] = "loss";
      // The evaluation: the instructions the loss depends on.
      SmallVector<int64_t> selected;
      const DenseMap<int64_t, trellis::SendOp> noTransfers;
      for (Operation *op : lossSlice(
               value, [](Operation *) { return true; }, noTransfers))
        if (auto found = instructionIndex.find(op);
            found != instructionIndex.end())
          selected.push_back(found->second);
      (*stages.front().getAsObject())["evaluation"] =
          evaluationEntry({"step"}, std::move(selected));
    }
    results.push_back(std::move(entry));
  }
  return planObject(1, std::move(metadata), meshArray(),
                    toArray(std::move(buffers_)),
                    toArray(std::move(arguments)),
                    toArray(std::move(results)), std::move(stages));
}

FailureOr<llvm::json::Value>
Emitter::emitStages(SmallVector<func::FuncOp> stages, PlanMetadata metadata) {
  staged_ = true;
  func::FuncOp first = stages.front();
  bool pipelined = stages.size() > 1;
  // The mesh: @pipeline (the pipeline axis and the step's) with several
  // stages, the step's with one.
  if (pipelined) {
    ModuleOp module = first->getParentOfType<ModuleOp>();
    mesh_ = module.lookupSymbol<MeshOp>("pipeline");
    if (!mesh_)
      return first.emitError("expected the pipeline's mesh @pipeline");
    module.walk([&](MeshOp mesh) {
      if (mesh != mesh_ && !stepMesh_)
        stepMesh_ = mesh;
    });
  }
  for (func::FuncOp stage : stages)
    if (failed(findMesh(stage)))
      return failure();
  std::string pipelineAxis;
  auto microBatches =
      first->getAttrOfType<IntegerAttr>(GraphDialect::kMicroBatchesAttrName);
  if (!microBatches)
    return first.emitError("expected a stage of a step of micro-batches "
                           "(graph.micro_batches)");

  // Arguments: one buffer for every stage.
  JsonEntries arguments;
  for (unsigned i = 0; i < first.getNumArguments(); ++i) {
    FailureOr<llvm::json::Object> entry = emitArgument(first, i);
    if (failed(entry))
      return failure();
    int64_t buffer = bufferIds_.lookup(first.getArgument(i));
    llvm::json::Array holders;
    for (auto [index, stage] : llvm::enumerate(stages)) {
      bufferIds_[stage.getArgument(i)] = buffer;
      if (stage.getArgAttr(i, TrellisDialect::kHeldAttrName))
        holders.push_back(static_cast<int64_t>(index));
    }
    if (pipelined)
      (*entry)["stages"] = std::move(holders);
    arguments.push_back(std::move(*entry));
  }
  // Buffers that name one value on several stages: a transfer's (the
  // receive writes the buffer the send reads) and a result's (each stage
  // that holds it makes its own copy).
  std::map<int64_t, int64_t> channelBuffer;
  for (func::FuncOp stage : stages) {
    WalkResult walk = stage.walk([&](SendOp send) -> WalkResult {
      auto program =
          send->getAttrOfType<StringAttr>(TrellisDialect::kProgramAttrName);
      FailureOr<int64_t> id = defineBuffer(
          send.getInput(), send, program && program.getValue() != "step");
      if (failed(id))
        return WalkResult::interrupt();
      channelBuffer[send.getChannel()] = *id;
      pipelineAxis =
          llvm::cast<StringAttr>(send.getAxes()[0]).getValue().str();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  for (func::FuncOp stage : stages) {
    WalkResult walk = stage.walk([&](RecvOp recv) -> WalkResult {
      auto it = channelBuffer.find(recv.getChannel());
      if (it == channelBuffer.end()) {
        recv.emitOpError() << "receives channel " << recv.getChannel()
                           << ", which no stage sends";
        return WalkResult::interrupt();
      }
      bufferIds_[recv.getResult()] = it->second;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  // Results by their index in the step: the first stage that returns one
  // (and its position there) names its buffer; the others' copies share it.
  std::map<int64_t, std::pair<func::FuncOp, unsigned>> resultOwner;
  std::map<int64_t, llvm::json::Array> resultHolders;
  SmallVector<Value> losses;
  for (auto [stageIndex, stage] : llvm::enumerate(stages)) {
    FailureOr<SmallVector<std::pair<unsigned, Value>>> returned =
        stageResults(stage);
    if (failed(returned))
      return failure();
    for (auto [i, entry] : llvm::enumerate(*returned)) {
      auto [index, value] = entry;
      if (index == 0 &&
          !stage.getResultAttr(i, GraphDialect::kUpdatesAttrName) &&
          !stage.getResultAttr(i, "graph.gradient_of"))
        losses.push_back(value);
      auto [owner, inserted] = resultOwner.try_emplace(
          index, stage, static_cast<unsigned>(i));
      if (inserted) {
        if (failed(defineBuffer(value, stage)))
          return failure();
      } else if (!bufferIds_.count(value)) {
        Value ownerValue = owner->second.first.getBody()
                               .front()
                               .getTerminator()
                               ->getOperand(owner->second.second);
        bufferIds_[value] = bufferIds_.lookup(ownerValue);
      }
      resultHolders[index].push_back(static_cast<int64_t>(stageIndex));
    }
  }

  // The evaluation: each stage's forward actions, then the ops of its step
  // program the loss depends on, across stages.
  DenseMap<int64_t, SendOp> sendOf;
  for (func::FuncOp stage : stages)
    stage.walk([&](SendOp send) { sendOf[send.getChannel()] = send; });
  auto inStepProgram = [](Operation *op) {
    auto name = op->getAttrOfType<StringAttr>(TrellisDialect::kProgramAttrName);
    return name && name.getValue() == "step";
  };
  DenseSet<Operation *> evaluated = lossSlice(losses, inStepProgram, sendOf);

  llvm::json::Array stageEntries;
  for (auto [index, stage] : llvm::enumerate(stages)) {
    // Programs in the order their first op comes.
    llvm::json::Array programs;
    std::map<std::string, size_t> programIndex;
    std::vector<JsonEntries> instructions;
    std::vector<std::string> names;
    SmallVector<int64_t> stepInstructions;
    for (Operation &op : stage.getBody().front().without_terminator()) {
      auto name =
          op.getAttrOfType<StringAttr>(TrellisDialect::kProgramAttrName);
      if (!name)
        return op.emitOpError("belongs to no action program (trellis.program)");
      auto [it, inserted] =
          programIndex.try_emplace(name.getValue().str(), names.size());
      if (inserted) {
        names.push_back(name.getValue().str());
        instructions.emplace_back();
      }
      FailureOr<llvm::json::Object> instruction = emitInstruction(op);
      if (failed(instruction))
        return failure();
      if (evaluated.contains(&op))
        stepInstructions.push_back(
            static_cast<int64_t>(instructions[it->second].size()));
      instructions[it->second].push_back(std::move(*instruction));
    }
    for (auto [name, program] : llvm::zip(names, instructions)) {
      llvm::json::Object entry{{"name", name}};
      entry["program"] = toArray(std::move(program));
      programs.push_back(std::move(entry));
    }
    auto scheduleAttr =
        stage->getAttrOfType<ArrayAttr>(TrellisDialect::kScheduleAttrName);
    if (!scheduleAttr)
      return stage.emitError("expected the stage's schedule (trellis.schedule)");
    std::vector<std::string> actions;
    for (Attribute entry : scheduleAttr)
      actions.push_back(llvm::cast<StringAttr>(entry).getValue().str());
    llvm::json::Object entry{{"stage", static_cast<int64_t>(index)}};
    entry["programs"] = std::move(programs);
    entry["schedule"] = llvm::json::Array(actions);
    if (!losses.empty())
      entry["evaluation"] =
          evaluationEntry(actions, std::move(stepInstructions));
    stageEntries.push_back(std::move(entry));
  }

  JsonEntries results;
  for (auto &[index, owner] : resultOwner) {
    if (index != static_cast<int64_t>(results.size()))
      return first.emitError() << "no stage holds result " << results.size()
                               << " of the step";
    auto [stage, i] = owner;
    Value value = stage.getBody().front().getTerminator()->getOperand(i);
    llvm::json::Object entry = emitResult(stage, i, bufferIds_.lookup(value));
    if (index == 0 && !entry.get("updates") && !entry.get("gradient_of"))
      entry["role"] = "loss";
    if (pipelined)
      entry["stages"] = std::move(resultHolders[index]);
    results.push_back(std::move(entry));
  }
  llvm::json::Value plan =
      planObject(microBatches.getInt(), std::move(metadata), meshArray(),
                 toArray(std::move(buffers_)), toArray(std::move(arguments)),
                 toArray(std::move(results)), std::move(stageEntries));
  if (pipelined)
    (*plan.getAsObject())["pipeline_axis"] = pipelineAxis;
  return plan;
}

} // namespace

FailureOr<llvm::json::Value> trellis::emitPlan(func::FuncOp step,
                                               PlanMetadata metadata) {
  return Emitter().emit(step, std::move(metadata));
}

FailureOr<llvm::json::Value> trellis::emitStagedPlan(ModuleOp module,
                                                     StringRef stepName,
                                                     PlanMetadata metadata) {
  FailureOr<SmallVector<func::FuncOp>> stages =
      findStageFunctions(module, stepName);
  if (failed(stages))
    return failure();
  return Emitter().emitStages(std::move(*stages), std::move(metadata));
}
