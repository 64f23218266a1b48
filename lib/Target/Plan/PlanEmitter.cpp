//===- PlanEmitter.cpp - Training step to plan file -----------------------===//

#include "trellis/Target/Plan/PlanEmitter.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

llvm::json::Array shapeArray(ArrayRef<int64_t> shape) {
  llvm::json::Array array;
  for (int64_t size : shape)
    array.push_back(size);
  return array;
}

/// The plan's name of a tensor element type, or empty if unsupported.
StringRef dtypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isInteger(32))
    return "i32";
  return "";
}

/// Converts an op attribute to JSON, or nullopt if it has no plan form.
std::optional<llvm::json::Value> attributeToJson(Attribute attr) {
  if (llvm::isa<UnitAttr>(attr))
    return llvm::json::Value(true);
  if (auto flag = llvm::dyn_cast<BoolAttr>(attr))
    return llvm::json::Value(flag.getValue());
  if (auto function = llvm::dyn_cast<UnaryFunctionAttr>(attr))
    return llvm::json::Value(stringifyUnaryFunction(function.getValue()).str());
  if (auto integer = llvm::dyn_cast<IntegerAttr>(attr))
    return llvm::json::Value(integer.getInt());
  if (auto real = llvm::dyn_cast<FloatAttr>(attr))
    return llvm::json::Value(real.getValueAsDouble());
  if (auto kind = llvm::dyn_cast<ReductionKindAttr>(attr))
    return llvm::json::Value(stringifyReductionKind(kind.getValue()).str());
  if (auto array = llvm::dyn_cast<ArrayAttr>(attr)) {
    llvm::json::Array names;
    for (Attribute element : array) {
      auto name = llvm::dyn_cast<StringAttr>(element);
      if (!name)
        return std::nullopt;
      names.push_back(name.getValue().str());
    }
    return llvm::json::Value(std::move(names));
  }
  if (auto ints = llvm::dyn_cast<DenseI64ArrayAttr>(attr))
    return llvm::json::Value(shapeArray(ints.asArrayRef()));
  if (auto reals = llvm::dyn_cast<DenseF64ArrayAttr>(attr)) {
    llvm::json::Array array;
    for (double value : reals.asArrayRef())
      array.push_back(value);
    return llvm::json::Value(std::move(array));
  }
  return std::nullopt;
}

class Emitter {
public:
  FailureOr<llvm::json::Value> emit(func::FuncOp step, PlanMetadata metadata,
                                    const PipelinePlan *pipeline);

private:
  /// The instruction of `op` (its results get buffers on first sight).
  FailureOr<llvm::json::Object> emitInstruction(Operation &op);
  /// The instruction of one end of a pipeline transfer.
  FailureOr<llvm::json::Object> emitTransfer(const PipelinePlan &pipeline,
                                             const StageItem &item,
                                             Operation *where);

  /// The mesh every sharding and collective of `step` uses (a plan runs on
  /// one mesh), or none for a single-device program.
  FailureOr<MeshOp> findMesh(func::FuncOp step);
  /// Uses of a mesh must name the plan's mesh.
  LogicalResult checkMesh(Operation *where, FlatSymbolRefAttr name);

  /// Assigns a buffer to `value` (once); `perMicroBatch` marks it as one
  /// micro-batch's (each micro-batch the schedule runs has its own copy).
  FailureOr<int64_t> defineBuffer(Value value, Operation *where,
                                  bool perMicroBatch = false);
  /// Whether `op`'s results are values of one micro-batch in a plan of
  /// action programs.
  bool makesMicroBatchValues(Operation &op) const {
    return pipeline_ && !llvm::isa<MicrobatchSumOp>(op) &&
           op.hasAttr(GraphDialect::kPhaseAttrName);
  }
  /// The stages' programs and schedules of a plan of action programs.
  FailureOr<llvm::json::Array> emitActionStages(func::FuncOp step);

  DenseMap<Value, int64_t> bufferIds_;
  llvm::json::Array buffers_;
  MeshOp mesh_;
  const PipelinePlan *pipeline_ = nullptr;
};

LogicalResult Emitter::checkMesh(Operation *where, FlatSymbolRefAttr name) {
  if (!mesh_)
    mesh_ = lookupMesh(where, name, [&] { return where->emitError(); });
  if (!mesh_)
    return failure();
  if (mesh_.getSymName() != name.getValue())
    return where->emitError() << "a plan runs on one mesh: found @"
                              << mesh_.getSymName() << " and " << name;
  return success();
}

FailureOr<MeshOp> Emitter::findMesh(func::FuncOp step) {
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (auto sharding = step.getArgAttrOfType<ShardingAttr>(
            i, TrellisDialect::kShardingAttrName))
      if (failed(checkMesh(step, sharding.getMeshName())))
        return failure();
  WalkResult walk = step.walk([&](Operation *op) {
    if (auto mesh = op->getAttrOfType<FlatSymbolRefAttr>("mesh"))
      if (failed(checkMesh(op, mesh)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return mesh_;
}

FailureOr<int64_t> Emitter::defineBuffer(Value value, Operation *where,
                                         bool perMicroBatch) {
  if (auto known = bufferIds_.find(value); known != bufferIds_.end())
    return known->second;
  auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
  StringRef dtype = type ? dtypeName(type.getElementType()) : "";
  if (!type || !type.hasStaticShape() || dtype.empty())
    return where->emitError() << "the plan holds static tensors of f32 or i32,"
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

FailureOr<llvm::json::Object>
Emitter::emitTransfer(const PipelinePlan &pipeline, const StageItem &item,
                      Operation *where) {
  const StageTransfer &transfer = pipeline.program.transfers[item.transfer];
  FailureOr<int64_t> id =
      defineBuffer(transfer.value, where, transfer.perMicroBatch);
  if (failed(id))
    return failure();
  bool sending = item.kind == StageItem::Kind::Send;
  llvm::json::Array buffer{*id};
  llvm::json::Object attrs{
      {"axes", llvm::json::Array{pipeline.axis}},
      {"peer", sending ? transfer.to : transfer.from},
      {"channel", transfer.channel},
  };
  if (sending && transfer.completedBy >= 0)
    attrs["complete_with"] =
        pipeline.program.transfers[transfer.completedBy].channel;
  return llvm::json::Object{
      {"op", sending ? "send" : "recv"},
      {"inputs", sending ? std::move(buffer) : llvm::json::Array()},
      {"outputs", sending ? llvm::json::Array() : std::move(buffer)},
      {"attrs", std::move(attrs)},
  };
}

FailureOr<llvm::json::Array> Emitter::emitActionStages(func::FuncOp step) {
  const PipelineProgram &split = pipeline_->program;
  llvm::json::Array stages;
  for (int64_t rank = 0; rank < split.ranks(); ++rank) {
    llvm::json::Array programs;
    for (const ActionProgram &action : split.programs[rank]) {
      llvm::json::Array instructions;
      for (const StageItem &item : action.items) {
        FailureOr<llvm::json::Object> instruction =
            item.kind == StageItem::Kind::Op
                ? emitInstruction(*item.op)
                : emitTransfer(*pipeline_, item, step);
        if (failed(instruction))
          return failure();
        instructions.push_back(std::move(*instruction));
      }
      llvm::json::Object entry{{"name", action.name()}};
      entry["program"] = std::move(instructions);
      programs.push_back(std::move(entry));
    }
    llvm::json::Array schedule;
    for (const ScheduledAction &entry : split.schedule[rank])
      schedule.push_back(split.programs[rank][entry.program].actionName(
          entry.microBatch, split.chunks));
    llvm::json::Object stage{{"stage", rank}};
    stage["programs"] = std::move(programs);
    stage["schedule"] = std::move(schedule);
    stages.push_back(std::move(stage));
  }
  return stages;
}

FailureOr<llvm::json::Value> Emitter::emit(func::FuncOp step,
                                           PlanMetadata metadata,
                                           const PipelinePlan *pipeline) {
  if (!llvm::hasSingleElement(step.getBody()))
    return step.emitError("expected a function with a single block");
  pipeline_ = pipeline;
  Block &body = step.getBody().front();
  if (failed(findMesh(step)))
    return failure();
  bool pipelined = pipeline && !pipeline->axis.empty();
  llvm::json::Array mesh;
  if (pipelined) {
    // The pipeline's mesh adds its axis to the step's (same sizes).
    for (const auto &[name, size] : pipeline->mesh) {
      std::optional<MeshAxisAttr> stepAxis;
      if (mesh_)
        for (MeshAxisAttr axis : mesh_.getMesh().getAxes())
          if (axis.getName() == name)
            stepAxis = axis;
      if (name == pipeline->axis
              ? stepAxis.has_value() || size != pipeline->program.ranks()
              : stepAxis && stepAxis->getSize() != size)
        return step.emitError()
               << "the pipeline mesh's axis '" << name << "' of size " << size
               << " does not match the step's mesh and stages";
      mesh.push_back(llvm::json::Object{{"name", name}, {"size", size}});
    }
    if (mesh_)
      for (MeshAxisAttr axis : mesh_.getMesh().getAxes())
        if (llvm::none_of(pipeline->mesh, [&](const auto &entry) {
              return entry.first == axis.getName();
            }))
          return step.emitError() << "the pipeline mesh lacks the step's axis '"
                                  << axis.getName() << "'";
  } else if (mesh_) {
    for (MeshAxisAttr axis : mesh_.getMesh().getAxes())
      mesh.push_back(llvm::json::Object{{"name", axis.getName().str()},
                                        {"size", axis.getSize()}});
  } else {
    mesh.push_back(llvm::json::Object{{"name", "dp"}, {"size", 1}});
  }

  llvm::json::Array arguments;
  for (BlockArgument arg : body.getArguments()) {
    auto role = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  GraphDialect::kRoleAttrName);
    // Inputs hold one micro-batch.
    FailureOr<int64_t> id = defineBuffer(
        arg, step, pipeline && role && role.getValue() == "input");
    if (failed(id))
      return failure();
    llvm::json::Object entry{{"buffer", *id}};
    for (StringRef key :
         {GraphDialect::kRoleAttrName, GraphDialect::kParamNameAttrName,
          GraphDialect::kInitAttrName}) {
      auto text = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), key);
      if (text)
        entry[key.drop_front(strlen("graph."))] = text.getValue().str();
    }
    if (!entry.get("role"))
      return step.emitError()
             << "argument " << arg.getArgNumber() << " has no graph.role";
    if (auto fileShape = step.getArgAttrOfType<DenseI64ArrayAttr>(
            arg.getArgNumber(), GraphDialect::kFileShapeAttrName))
      entry["file_shape"] = shapeArray(fileShape.asArrayRef());
    if (auto sharding = step.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), TrellisDialect::kShardingAttrName)) {
      if (!sharding.getPartialAxes().empty())
        return step.emitError() << "argument " << arg.getArgNumber()
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
    if (pipelined)
      entry["stages"] =
          shapeArray(pipeline->program.argumentRanks[arg.getArgNumber()]);
    arguments.push_back(std::move(entry));
  }

  llvm::json::Array stages;
  if (pipeline) {
    // Buffers in the step's order: programs read values that other
    // programs of their stage (or other stages) make.
    for (Operation &op : body.without_terminator())
      for (Value result : op.getResults())
        if (failed(defineBuffer(result, &op, makesMicroBatchValues(op))))
          return failure();
    FailureOr<llvm::json::Array> actionStages = emitActionStages(step);
    if (failed(actionStages))
      return failure();
    stages = std::move(*actionStages);
  } else {
    // One program: the step of one micro-batch, whose totals are the
    // micro-batch's values themselves.
    llvm::json::Array program;
    for (Operation &op : body.without_terminator()) {
      if (llvm::isa<MicrobatchSumOp>(op)) {
        bufferIds_[op.getResult(0)] = bufferIds_.lookup(op.getOperand(0));
        continue;
      }
      FailureOr<llvm::json::Object> instruction = emitInstruction(op);
      if (failed(instruction))
        return failure();
      program.push_back(std::move(*instruction));
    }
    llvm::json::Object stepProgram{{"name", "step"}};
    stepProgram["program"] = std::move(program);
    llvm::json::Array programs;
    programs.push_back(std::move(stepProgram));
    llvm::json::Object stage{{"stage", 0},
                             {"schedule", llvm::json::Array{"step"}}};
    stage["programs"] = std::move(programs);
    stages.push_back(std::move(stage));
  }

  llvm::json::Array results;
  Operation *terminator = body.getTerminator();
  for (auto [index, value] : llvm::enumerate(terminator->getOperands())) {
    auto it = bufferIds_.find(value);
    if (it == bufferIds_.end())
      return step.emitError("a result is not produced by the program");
    llvm::json::Object entry{{"buffer", it->second}};
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            index, GraphDialect::kUpdatesAttrName))
      entry["updates"] = updates.getInt();
    else if (auto gradientOf = step.getResultAttrOfType<IntegerAttr>(
                 index, "graph.gradient_of"))
      entry["gradient_of"] = gradientOf.getInt();
    else if (index == 0)
      entry["role"] = "loss";
    if (pipelined)
      entry["stages"] = shapeArray(pipeline->program.resultRanks[index]);
    results.push_back(std::move(entry));
  }

  // Members are moved in one by one: an initializer list would copy them.
  llvm::json::Object plan{
      {"format", "trellis-plan"},
      {"version", kPlanFormatVersion},
      {"micro_batches", pipeline ? pipeline->program.microBatches : 1},
  };
  plan["metadata"] = std::move(metadata.fields);
  plan["mesh"] = std::move(mesh);
  plan["buffers"] = std::move(buffers_);
  plan["arguments"] = std::move(arguments);
  plan["results"] = std::move(results);
  plan["stages"] = std::move(stages);
  if (pipelined)
    plan["pipeline_axis"] = pipeline->axis;
  return llvm::json::Value(std::move(plan));
}

} // namespace

FailureOr<llvm::json::Value> trellis::emitPlan(func::FuncOp step,
                                               PlanMetadata metadata,
                                               const PipelinePlan *pipeline) {
  return Emitter().emit(step, std::move(metadata), pipeline);
}
