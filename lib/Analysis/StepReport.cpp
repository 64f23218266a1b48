//===- StepReport.cpp - What one rank holds and sends per step ------------===//

#include "trellis/Analysis/StepReport.h"

#include "trellis/Common/MemoryPlan.h"
#include "trellis/Common/OpContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace trellis {

namespace {

int64_t bytesOf(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements() * ((tensor.getElementTypeBitWidth() + 7) / 8);
}

std::string formatBytes(int64_t bytes) {
  if (bytes >= (int64_t(1) << 30))
    return llvm::formatv("{0:F2} GiB", bytes / double(1 << 30)).str();
  if (bytes >= (1 << 20))
    return llvm::formatv("{0:F2} MiB", bytes / double(1 << 20)).str();
  if (bytes >= (1 << 10))
    return llvm::formatv("{0:F1} KiB", bytes / 1024.0).str();
  return llvm::formatv("{0} B", bytes).str();
}

/// Bytes one rank sends for `op` under ring algorithms (StepReport.h).
int64_t wireBytes(Operation *op) {
  return ringWireBytes(op->getName().stripDialect(), groupSizeOf(op),
                       bytesOf(op->getOperand(0).getType()),
                       op->getNumResults() ? bytesOf(op->getResult(0).getType())
                                           : 0);
}

/// The ranks along `axes` of the program's mesh (1 without one).
int64_t meshGroupSize(Operation *op, ArrayAttr axes) {
  auto module = op->getParentOfType<ModuleOp>();
  MeshOp mesh;
  if (module)
    module.walk([&](MeshOp found) {
      mesh = found;
      return WalkResult::interrupt();
    });
  return meshAxesSize(mesh, axes);
}

/// What an expert op with the all-to-all dispatch hands its exchanges (the
/// rows it sends, in fp32 as the kernels send them, their expert ids and
/// the counts), and what it sends with the experts balanced: a share
/// (n - 1) / n of its slots go to other ranks, and an expert_matmul's
/// products for as many slots come back. Zero for any other op.
StepReport::Traffic expertExchange(Operation *op) {
  StepReport::Traffic traffic;
  auto dispatch = op->getAttrOfType<StringAttr>("dispatch");
  if (!dispatch || dispatch.getValue() != "all_to_all")
    return traffic;
  auto axes = op->getAttrOfType<ArrayAttr>("axes");
  int64_t ranks = meshGroupSize(op, axes);
  auto ids = llvm::cast<RankedTensorType>(op->getOperand(2).getType());
  int64_t slots = ids.getNumElements();
  int64_t depth = llvm::cast<RankedTensorType>(op->getOperand(0).getType())
                      .getShape()
                      .back();
  int64_t width =
      llvm::cast<RankedTensorType>(llvm::isa<graph::ExpertMatmulOp>(op)
                                       ? op->getResult(0).getType()
                                       : op->getOperand(1).getType())
          .getShape()
          .back();
  // Rows out: the lhs (and a weight gradient's result gradient) with the
  // ids; back: an expert_matmul's products.
  bool product = llvm::isa<graph::ExpertMatmulOp>(op);
  int64_t out = slots * 4 * (depth + 1 + (product ? 0 : width));
  int64_t back = product ? slots * 4 * width : 0;
  traffic.count = 1;
  traffic.bytes = out;
  traffic.wireBytes = (out + back) * (ranks - 1) / ranks + 4 * (ranks - 1);
  return traffic;
}

/// The global elements of argument `index` of `step` (local elements times
/// the ranks its sharding splits it over).
int64_t globalElements(func::FuncOp step, unsigned index) {
  auto type = llvm::cast<RankedTensorType>(step.getArgumentTypes()[index]);
  int64_t elements = type.getNumElements();
  auto sharding = step.getArgAttrOfType<ShardingAttr>(
      index, TrellisDialect::kShardingAttrName);
  if (!sharding)
    return elements;
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
      step, sharding.getMeshName().getAttr());
  if (!mesh)
    return elements;
  for (DimShardingAttr dim : sharding.getDims())
    for (StringAttr axis : dim.getAxes())
      for (MeshAxisAttr meshAxis : mesh.getMesh().getAxes())
        if (meshAxis.getName() == axis.getValue())
          elements *= meshAxis.getSize();
  return elements;
}

/// The values a micro-batch hands to the step for `update` (an optimizer
/// op's gradient operand, followed back through the step's ops: sums over
/// micro-batches, reductions, bucket slices, adds of tied parameters).
void collectGradientValues(Value value, llvm::DenseSet<Value> &visited,
                           llvm::DenseSet<Value> &found) {
  if (!visited.insert(value).second)
    return;
  Operation *producer = value.getDefiningOp();
  // A gradient reduced in the compute dtype is held in it: its cast back
  // to f32 (graph.reduce_first) belongs to the update.
  bool castForUpdate =
      producer && producer->hasAttr(graph::GraphDialect::kReduceFirstAttrName);
  if (!producer ||
      (producer->hasAttr(graph::GraphDialect::kPhaseAttrName) &&
       !castForUpdate) ||
      llvm::isa<RecvOp>(producer)) {
    if (producer)
      found.insert(value);
    return;
  }
  for (Value operand : producer->getOperands())
    if (llvm::cast<RankedTensorType>(operand.getType()).getRank() > 0)
      collectGradientValues(operand, visited, found);
}

} // namespace

const OpContract *planContractOf(Operation *op) {
  if (const OpContract *contract = graph::contractOf(op))
    return contract;
  if (llvm::isa_and_nonnull<TrellisDialect>(op->getDialect()))
    return findOpContract(op->getName().stripDialect().str());
  return nullptr;
}

bool kernelCommunicatesAt(Operation *op) {
  auto axes = op->getAttrOfType<ArrayAttr>("axes");
  return kernelCommunicates(planContractOf(op), axes && !axes.empty(),
                            [&](const std::string &name) -> std::string {
                              auto text = op->getAttrOfType<StringAttr>(name);
                              return text ? text.getValue().str() : "";
                            });
}

bool isOptimizerStateRole(StringRef role) {
  return role == "adam_m" || role == "adam_v" || role == "master";
}

int64_t ringWireBytes(StringRef kind, int64_t groupSize, int64_t inBytes,
                      int64_t outBytes) {
  int64_t n = groupSize;
  if (n <= 1)
    return 0;
  if (kind == "all_reduce")
    return 2 * (n - 1) * inBytes / n;
  if (kind == "reduce_scatter" || kind == "all_to_all")
    return (n - 1) * inBytes / n;
  if (kind == "all_gather")
    return (n - 1) * outBytes / n;
  return inBytes; // broadcast, collective_permute
}

std::map<std::string, int64_t>
wireBytesByKind(const TrafficByCollective &communication) {
  std::map<std::string, int64_t> kinds;
  for (const char *kind : {"all_reduce", "reduce_scatter", "all_gather",
                           "all_to_all", "send", "recv"})
    kinds[kind] = 0;
  for (const auto &[key, traffic] : communication)
    kinds[key.substr(0, key.find(' '))] += traffic.wireBytes;
  return kinds;
}

llvm::json::Object trafficJson(const TrafficByCollective &communication) {
  llvm::json::Object calls;
  for (const auto &[key, traffic] : communication)
    calls[key] = llvm::json::Object{{"calls", traffic.count},
                                    {"bytes", traffic.bytes},
                                    {"wire_bytes", traffic.wireBytes}};
  return calls;
}

std::map<std::string, int64_t> StepReport::wireBytesByKind() const {
  return trellis::wireBytesByKind(communication);
}

StepReport computeStepReport(func::FuncOp step) {
  SmallVector<int64_t> arguments;
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    arguments.push_back(i);
  SmallVector<RankItem> items;
  if (!step.isExternal())
    for (Operation &op : step.getBody().front())
      items.push_back({&op, Value(), false, ""});
  return computeRankReport(step, arguments, items);
}

namespace {

/// The arguments that are mixture-of-experts weights: the `weight` of an
/// expert_matmul, through casts and gathers. Sets the experts per layer
/// the rank holds and the model has.
llvm::DenseSet<int64_t> expertWeights(StepReport &report, func::FuncOp step) {
  llvm::DenseSet<int64_t> found;
  if (step.isExternal())
    return found;
  step.walk([&](graph::ExpertMatmulOp op) {
    Value weight = op.getWeight();
    while (Operation *producer = weight.getDefiningOp()) {
      if (!llvm::isa<graph::CastOp, AllGatherOp, ShardOp>(producer))
        break;
      weight = producer->getOperand(0);
    }
    auto argument = llvm::dyn_cast<BlockArgument>(weight);
    if (!argument || argument.getOwner()->getParentOp() != step)
      return;
    found.insert(argument.getArgNumber());
    int64_t held =
        llvm::cast<RankedTensorType>(argument.getType()).getDimSize(0);
    report.expertsPerLayer = std::max(report.expertsPerLayer, held);
    // The model's: the held experts times the ranks the first dimension
    // is split over.
    int64_t ranks = 1;
    auto sharding = step.getArgAttrOfType<ShardingAttr>(
        argument.getArgNumber(), TrellisDialect::kShardingAttrName);
    auto mesh = sharding ? SymbolTable::lookupNearestSymbolFrom<MeshOp>(
                               step, sharding.getMeshName().getAttr())
                         : MeshOp();
    if (mesh && !sharding.getDims().empty())
      for (StringAttr axis : sharding.getDims()[0].getAxes())
        ranks *= mesh.getMesh().getAxisSize(axis.getValue());
    report.modelExpertsPerLayer =
        std::max(report.modelExpertsPerLayer, held * ranks);
  });
  return found;
}

/// Model states: the parameters and optimizer states among the arguments
/// this rank holds, and every argument's bytes (inputs once per
/// micro-batch).
void addModelStates(StepReport &report, func::FuncOp step,
                    ArrayRef<int64_t> arguments, int64_t microBatches) {
  llvm::DenseSet<int64_t> experts = expertWeights(report, step);
  for (int64_t i : arguments) {
    auto role = step.getArgAttrOfType<StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    Type type = step.getArgumentTypes()[i];
    int64_t bytes = bytesOf(type);
    if (role && role.getValue() == "param") {
      report.parameterBytes += bytes;
      report.parameterCount +=
          llvm::cast<RankedTensorType>(type).getNumElements();
      report.stageParameterCount += globalElements(step, i);
      if (experts.contains(i))
        report.expertParameterCount +=
            llvm::cast<RankedTensorType>(type).getNumElements();
    } else if (role && isOptimizerStateRole(role.getValue())) {
      report.optimizerStateBytes += bytes;
    }
    report.persistentBytes +=
        role && role.getValue() == "input" ? bytes * microBatches : bytes;
  }
}

/// Gradients: what each update's micro-batches hand to the step.
void addGradients(StepReport &report, ArrayRef<RankItem> items) {
  llvm::DenseSet<Value> visited, gradients;
  for (const RankItem &item : items)
    if (const OpContract *contract =
            item.op ? graph::contractOf(item.op) : nullptr;
        contract && contract->isUpdate())
      collectGradientValues(
          item.op->getOperand(contract->effects.gradientOperand), visited,
          gradients);
  for (Value gradient : gradients)
    report.gradientBytes += bytesOf(gradient.getType());
}

/// Activations each part keeps: its forward's values a backward op reads.
void addSavedActivations(StepReport &report, ArrayRef<RankItem> items) {
  llvm::DenseSet<Value> counted;
  for (const RankItem &item : items) {
    if (!item.op || item.microBatch > 0)
      continue;
    auto phase =
        item.op->getAttrOfType<StringAttr>(graph::GraphDialect::kPhaseAttrName);
    graph::PartAttr part = graph::getModelPart(item.op);
    if (!phase || phase.getValue() != "forward" || !part)
      continue;
    for (Value result : item.op->getResults()) {
      bool saved = llvm::any_of(result.getUsers(), [](Operation *user) {
        auto use = user->getAttrOfType<StringAttr>(
            graph::GraphDialect::kPhaseAttrName);
        return use && use.getValue() != "forward";
      });
      if (saved && counted.insert(result).second)
        report.savedActivationBytes[part.str()] += bytesOf(result.getType());
    }
  }
}

/// A value of one micro-batch (values of graph.phase ops other than
/// micro-batch sums are each micro-batch's own), or of the step (-1).
using ValueKey = std::pair<Value, int64_t>;

ValueKey keyOf(Value value, int64_t microBatch) {
  Operation *producer = value.getDefiningOp();
  bool perMicroBatch = producer &&
                       producer->hasAttr(graph::GraphDialect::kPhaseAttrName) &&
                       !graph::makesStepTotal(producer);
  return {value, perMicroBatch ? microBatch : -1};
}

/// A rank's items as the shared memory plan (planStepMemory) sees them:
/// one instruction per item but the return (results are persistent), one
/// buffer per value key.
struct RankProgram {
  std::vector<PlannedInstruction> instructions;
  std::vector<PlannedBuffer> buffers;
  DenseMap<ValueKey, int64_t> ids;
};

RankProgram planRankProgram(ArrayRef<RankItem> items,
                            const llvm::DenseSet<Value> &persistent,
                            int64_t microBatches) {
  RankProgram program;
  auto bufferOf = [&](Value value, int64_t microBatch) {
    auto [it, inserted] = program.ids.try_emplace(
        keyOf(value, microBatch), static_cast<int64_t>(program.buffers.size()));
    if (inserted) {
      PlannedBuffer buffer;
      buffer.bytes = bytesOf(value.getType());
      if (llvm::isa<BlockArgument>(value))
        buffer.kind = PlannedBuffer::Kind::Argument;
      else if (persistent.contains(value))
        buffer.kind = PlannedBuffer::Kind::Result;
      program.buffers.push_back(buffer);
    }
    return it->second;
  };
  for (const RankItem &item : items) {
    PlannedInstruction instruction;
    if (!item.op) {
      instruction.contract = findOpContract(item.sends ? "send" : "recv");
      instruction.overAxes = true;
      // The plan gives each run's transfers channels of their own (the
      // step's after the micro-batches').
      instruction.channel =
          item.channel * (microBatches + 1) + item.microBatch + 1;
      instruction.peer = item.peer;
      instruction.completesAt = item.completesAt;
      int64_t buffer = bufferOf(item.value, item.microBatch);
      (item.sends ? instruction.inputs : instruction.outputs).push_back(buffer);
    } else if (llvm::isa<func::ReturnOp>(item.op)) {
      continue;
    } else {
      instruction.contract = planContractOf(item.op);
      auto axes = item.op->getAttrOfType<ArrayAttr>("axes");
      instruction.overAxes = axes && !axes.empty();
      instruction.communicates = kernelCommunicatesAt(item.op);
      for (Value operand : item.op->getOperands())
        instruction.inputs.push_back(bufferOf(operand, item.microBatch));
      for (Value result : item.op->getResults())
        instruction.outputs.push_back(bufferOf(result, item.microBatch));
    }
    program.instructions.push_back(std::move(instruction));
  }
  return program;
}

} // namespace

void planItemSendCompletions(MutableArrayRef<SmallVector<RankItem>> stages,
                             int64_t microBatches) {
  // Items and planned instructions correspond one to one but for the
  // return, which is last.
  std::vector<std::vector<PlannedInstruction>> programs;
  for (ArrayRef<RankItem> items : stages)
    programs.push_back(
        planRankProgram(items, /*persistent=*/{}, microBatches).instructions);
  planSendCompletions(programs);
  for (auto [items, program] : llvm::zip(stages, programs))
    for (auto [index, instruction] : llvm::enumerate(program))
      if (!items[index].op)
        items[index].completesAt = instruction.completesAt;
}

namespace {

/// The updates that may be computed in their argument's memory, as the
/// runtime lists them (Executor::planMemory): results marked as updating an
/// argument this rank holds, of its type; with a loss scale only when the
/// updates are guarded (-trellis-guard-updates gives them a grad_scale:
/// the plan's "update_guard" result, which only rank 0 may hold, says so
/// too).
std::vector<PlannedUpdate> inPlaceCandidates(func::FuncOp step,
                                             ArrayRef<int64_t> arguments,
                                             ArrayRef<RankItem> items,
                                             const RankProgram &program) {
  std::vector<PlannedUpdate> updates;
  bool scaled = llvm::any_of(arguments, [&](int64_t i) {
    auto role = step.getArgAttrOfType<StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    return role && role.getValue() == "loss_scale";
  });
  bool guarded = llvm::any_of(items, [](const RankItem &item) {
    const OpContract *contract = item.op ? graph::contractOf(item.op) : nullptr;
    return contract && contract->hasGradientScale(item.op->getNumOperands());
  });
  if ((scaled && !guarded) || items.empty() || !items.back().op ||
      !llvm::isa<func::ReturnOp>(items.back().op))
    return updates;
  for (auto [r, value] : llvm::enumerate(items.back().op->getOperands())) {
    auto updated = step.getResultAttrOfType<IntegerAttr>(
        r, graph::GraphDialect::kUpdatesAttrName);
    if (!updated || !llvm::is_contained(arguments, updated.getInt()))
      continue;
    Value argument = step.getArgument(updated.getInt());
    auto result = program.ids.find(keyOf(value, -1));
    auto into = program.ids.find(keyOf(argument, -1));
    if (argument.getType() == value.getType() && result != program.ids.end() &&
        into != program.ids.end())
      updates.push_back({result->second, into->second});
  }
  return updates;
}

} // namespace

StepReport computeRankReport(func::FuncOp step, ArrayRef<int64_t> arguments,
                             ArrayRef<RankItem> items, int64_t microBatches,
                             bool withMemoryPlan) {
  StepReport report;
  addModelStates(report, step, arguments, microBatches);
  addGradients(report, items);
  addSavedActivations(report, items);

  // Results and accumulators (micro-batch sums) are persistent.
  llvm::DenseSet<Value> persistent;
  for (const RankItem &item : items) {
    if (!item.op)
      continue;
    if (llvm::isa<func::ReturnOp>(item.op))
      for (Value result : item.op->getOperands())
        persistent.insert(result);
    if (graph::makesStepTotal(item.op))
      persistent.insert(item.op->getResult(0));
  }
  for (Value value : persistent)
    if (value.getDefiningOp())
      report.persistentBytes += bytesOf(value.getType());
  for (const RankItem &item : items) {
    if (!item.op) {
      StepReport::Traffic &traffic =
          report.communication[(item.sends ? "send over " : "recv over ") +
                               item.axis];
      ++traffic.count;
      traffic.bytes += bytesOf(item.value.getType());
      traffic.wireBytes += bytesOf(item.value.getType());
      continue;
    }
    Operation &op = *item.op;
    if (const OpContract *contract = graph::contractOf(&op)) {
      double flops = graph::costFromContract(&op).flops;
      report.flops += flops;
      if (flops > 0)
        report.flopsByOp[contract->name] += flops;
    }
    if (StepReport::Traffic exchange = expertExchange(&op); exchange.count) {
      std::string key = "expert_all_to_all over";
      for (Attribute axis : op.getAttrOfType<ArrayAttr>("axes"))
        key += " " + llvm::cast<StringAttr>(axis).getValue().str();
      StepReport::Traffic &traffic = report.communication[key];
      traffic.count += exchange.count;
      traffic.bytes += exchange.bytes;
      traffic.wireBytes += exchange.wireBytes;
      continue;
    }
    // Collectives move data; slice_shard only keeps a local piece.
    if (!llvm::isa_and_nonnull<TrellisDialect>(op.getDialect()) ||
        !op.getNumOperands() || llvm::isa<SendOp, RecvOp, SliceShardOp>(op))
      continue;
    std::string key = op.getName().stripDialect().str();
    if (auto axes = op.getAttrOfType<ArrayAttr>("axes")) {
      key += " over";
      for (Attribute axis : axes)
        key += " " + llvm::cast<StringAttr>(axis).getValue().str();
    }
    StepReport::Traffic &traffic = report.communication[key];
    ++traffic.count;
    traffic.bytes += bytesOf(op.getOperand(0).getType());
    traffic.wireBytes += wireBytes(&op);
  }

  // The memory plan, as the runtime builds it (planStepMemory): one buffer
  // per value and micro-batch (values of graph.phase ops are each
  // micro-batch's own), one planned instruction per item.
  RankProgram program = planRankProgram(items, persistent, microBatches);
  std::vector<PlannedUpdate> updates =
      inPlaceCandidates(step, arguments, items, program);
  StepMemoryPlan memory = planStepMemory(program.instructions, program.buffers,
                                         updates, withMemoryPlan);
  // Updates computed in their argument's memory need no bytes of their own.
  for (const PlannedUpdate &update : updates)
    if (memory.inPlace[update.result] >= 0)
      report.persistentBytes -= program.buffers[update.result].bytes;
  if (!withMemoryPlan)
    return report;
  report.arenaBytes = memory.arena.bytes;
  report.totalPeakBytes = report.persistentBytes + report.arenaBytes;
  return report;
}

void StepReport::print(llvm::raw_ostream &os) const {
  os << llvm::formatv("parameters: {0} ({1}) per rank, pieces of {2}\n",
                      parameterCount, formatBytes(parameterBytes),
                      stageParameterCount);
  double per = std::max<int64_t>(stageParameterCount, 1);
  os << llvm::formatv(
      "model states: {0} per rank = weights {1} + gradients {2} + optimizer "
      "{3} ({4:F2} bytes per parameter: {5:F2} + {6:F2} + {7:F2})\n",
      formatBytes(modelStateBytes()), formatBytes(parameterBytes),
      formatBytes(gradientBytes), formatBytes(optimizerStateBytes),
      modelStateBytes() / per, parameterBytes / per, gradientBytes / per,
      optimizerStateBytes / per);
  os << llvm::formatv("memory plan: {0} per rank = persistent {1} (arguments, "
                      "results, accumulators) + arena {2} (activations and "
                      "other temporaries)\n",
                      formatBytes(totalPeakBytes), formatBytes(persistentBytes),
                      formatBytes(arenaBytes));
  if (expertsPerLayer > 0)
    os << llvm::formatv("experts: {0} of each MoE layer's {1} per rank; "
                        "expert parameters {2} of the {3} per rank\n",
                        expertsPerLayer, modelExpertsPerLayer,
                        expertParameterCount, parameterCount);
  os << llvm::formatv("compute per step: {0:F3} GFLOP per rank\n", flops / 1e9);
  if (!savedActivationBytes.empty()) {
    os << "activations kept for the backward (one micro-batch):";
    for (const auto &[part, bytes] : savedActivationBytes)
      os << llvm::formatv(" {0} {1};", part, formatBytes(bytes));
    os << "\n";
  }
  if (communication.empty()) {
    os << "communication per step: none\n";
    return;
  }
  os << "communication per step (per rank): calls, bytes handed over, bytes "
        "sent (ring algorithms)\n";
  for (const auto &[key, traffic] : communication)
    os << llvm::formatv("  {0,-28} {1,5} calls  {2,11}  sent {3}\n", key,
                        traffic.count, formatBytes(traffic.bytes),
                        formatBytes(traffic.wireBytes));
}

llvm::json::Object StepReport::toJson() const {
  llvm::json::Object comm;
  for (const auto &[kind, bytes] : wireBytesByKind())
    comm[kind] = bytes;
  llvm::json::Object saved;
  for (const auto &[part, bytes] : savedActivationBytes)
    saved[part] = bytes;
  llvm::json::Object byOp;
  for (const auto &[op, opFlops] : flopsByOp)
    byOp[op] = opFlops;
  return llvm::json::Object{
      {"parameters", parameterCount},
      {"expert_parameters", expertParameterCount},
      {"experts_per_layer", expertsPerLayer},
      {"flops", flops},
      {"flops_by_op", std::move(byOp)},
      {"stage_parameters", stageParameterCount},
      {"bytes", llvm::json::Object{{"params", parameterBytes},
                                   {"grads", gradientBytes},
                                   {"optimizer", optimizerStateBytes},
                                   {"model_states", modelStateBytes()},
                                   {"persistent", persistentBytes},
                                   {"activations_peak", arenaBytes},
                                   {"total_peak", totalPeakBytes}}},
      {"comm_bytes", std::move(comm)},
      {"communication", trafficJson(communication)},
      {"activations_per_part", std::move(saved)},
  };
}

} // namespace trellis
