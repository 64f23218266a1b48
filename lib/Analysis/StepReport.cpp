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

/// Model states: the parameters and optimizer states among the arguments
/// this rank holds, and every argument's bytes (inputs once per
/// micro-batch).
void addModelStates(StepReport &report, func::FuncOp step,
                    ArrayRef<int64_t> arguments, int64_t microBatches) {
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

} // namespace

StepReport computeRankReport(func::FuncOp step, ArrayRef<int64_t> arguments,
                             ArrayRef<RankItem> items, int64_t microBatches,
                             bool withMemoryPlan) {
  StepReport report;
  addModelStates(report, step, arguments, microBatches);
  addGradients(report, items);
  addSavedActivations(report, items);

  // The memory plan, as the runtime builds it: a value (of one micro-batch,
  // or of the step) lives from the item that makes (or receives) it to the
  // last item that reads (or sends) it, or a collective's wait point;
  // results and accumulators (micro-batch sums) are persistent, the others
  // share the arena.
  using Key = std::pair<Value, int64_t>;
  auto keyOf = [](Value value, int64_t microBatch) -> Key {
    Operation *producer = value.getDefiningOp();
    bool perMicroBatch = producer &&
                         producer->hasAttr(graph::GraphDialect::kPhaseAttrName) &&
                         !llvm::isa<graph::MicrobatchSumOp>(producer);
    return {value, perMicroBatch ? microBatch : -1};
  };
  llvm::DenseSet<Value> persistent;
  for (const RankItem &item : items) {
    if (!item.op)
      continue;
    if (llvm::isa<func::ReturnOp>(item.op))
      for (Value result : item.op->getOperands())
        persistent.insert(result);
    if (llvm::isa<graph::MicrobatchSumOp>(item.op))
      persistent.insert(item.op->getResult(0));
  }
  for (Value value : persistent)
    if (value.getDefiningOp())
      report.persistentBytes += bytesOf(value.getType());
  DenseMap<Key, std::pair<int64_t, int64_t>> lifetime;
  std::vector<Key> order;
  auto use = [&](Value value, int64_t microBatch, int64_t index) {
    auto it = lifetime.find(keyOf(value, microBatch));
    if (it != lifetime.end())
      it->second.second = std::max(it->second.second, index);
  };
  auto define = [&](Value value, int64_t microBatch, int64_t index) {
    if (persistent.contains(value))
      return;
    Key key = keyOf(value, microBatch);
    if (lifetime.try_emplace(key, index, index).second)
      order.push_back(key);
  };
  // Collectives of the communication stream, with their buffers.
  struct Pending {
    int64_t issue;
    SmallVector<Key> buffers;
    SmallVector<Value> results;
    int64_t microBatch;
  };
  std::vector<Pending> collectives;
  for (auto [index, item] : llvm::enumerate(items)) {
    int64_t at = static_cast<int64_t>(index);
    if (!item.op) {
      if (item.sends)
        use(item.value, item.microBatch, at);
      else
        define(item.value, item.microBatch, at);
      StepReport::Traffic &traffic =
          report.communication[(item.sends ? "send over " : "recv over ") +
                               item.axis];
      ++traffic.count;
      traffic.bytes += bytesOf(item.value.getType());
      traffic.wireBytes += bytesOf(item.value.getType());
      continue;
    }
    Operation &op = *item.op;
    if (graph::contractOf(&op))
      report.flops += graph::costFromContract(&op).flops;
    for (Value operand : op.getOperands())
      use(operand, item.microBatch, at);
    for (Value result : op.getResults())
      define(result, item.microBatch, at);
    bool collective =
        op.getDialect() && llvm::isa<TrellisDialect>(op.getDialect()) &&
        op.getNumOperands() && !llvm::isa<SendOp, RecvOp>(op);
    if (!collective)
      continue;
    Pending pending{at, {}, SmallVector<Value>(op.getResults()),
                    item.microBatch};
    for (Value value : op.getOperands())
      pending.buffers.push_back(keyOf(value, item.microBatch));
    for (Value value : op.getResults())
      pending.buffers.push_back(keyOf(value, item.microBatch));
    collectives.push_back(std::move(pending));
    // Collectives move data; slice_shard only keeps a local piece.
    if (llvm::isa<SliceShardOp>(op))
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
  // A collective's buffers are in use until the program waits for it: its
  // first reader (or a kernel that communicates itself), or the issue of
  // the second collective after it (MemoryPlan.h).
  int64_t end = static_cast<int64_t>(items.size());
  // Who reads each value (of each micro-batch), in order, and where the
  // next kernel that communicates itself is.
  DenseMap<Key, SmallVector<int64_t, 2>> readers;
  std::vector<int64_t> nextCommunicating(items.size() + 1, end);
  for (int64_t j = end - 1; j >= 0; --j) {
    const RankItem &item = items[j];
    nextCommunicating[j] = nextCommunicating[j + 1];
    if (!item.op)
      continue;
    if (!llvm::isa<TrellisDialect>(item.op->getDialect()) &&
        item.op->hasAttr("axes"))
      nextCommunicating[j] = j;
  }
  for (auto [index, item] : llvm::enumerate(items)) {
    if (item.op)
      for (Value operand : item.op->getOperands())
        readers[keyOf(operand, item.microBatch)].push_back(index);
    else if (item.sends)
      readers[keyOf(item.value, item.microBatch)].push_back(index);
  }
  // The first item after `after` that reads `key`, or the end.
  auto readerAfter = [&](const Key &key, int64_t after) -> int64_t {
    auto it = readers.find(key);
    if (it == readers.end())
      return end;
    auto next = llvm::upper_bound(it->second, after);
    return next == it->second.end() ? end : *next;
  };
  std::vector<CollectiveWindow> windows;
  for (const Pending &pending : collectives) {
    int64_t reader = nextCommunicating[pending.issue + 1];
    for (Value result : pending.results)
      reader = std::min(
          reader, readerAfter(keyOf(result, pending.microBatch), pending.issue));
    int64_t bytes = 0;
    for (Value value : items[pending.issue].op->getOperands())
      bytes += bytesOf(value.getType());
    for (Value value : pending.results)
      bytes += bytesOf(value.getType());
    windows.push_back({pending.issue, reader, bytes});
  }
  std::vector<int64_t> waits = planCollectiveWaits(windows, end);
  for (auto [pending, wait] : llvm::zip(collectives, waits))
    for (const Key &key : pending.buffers) {
      auto it = lifetime.find(key);
      if (it != lifetime.end())
        it->second.second = std::max(it->second.second, wait);
    }
  // Updates computed in their argument's memory need no bytes of their own
  // (Executor::planInPlaceUpdates: the op that makes one is the last to
  // read the argument, element by element; never with a loss scale).
  DenseMap<int64_t, int64_t> waitOf;
  for (auto [pending, wait] : llvm::zip(collectives, waits))
    waitOf[pending.issue] = wait;
  bool scaled = llvm::any_of(arguments, [&](int64_t i) {
    auto role = step.getArgAttrOfType<StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    return role && role.getValue() == "loss_scale";
  });
  const RankItem *returned = items.empty() ? nullptr : &items.back();
  if (!scaled && returned && returned->op &&
      llvm::isa<func::ReturnOp>(returned->op)) {
    DenseMap<Operation *, int64_t> position;
    for (auto [index, item] : llvm::enumerate(items))
      if (item.op)
        position.try_emplace(item.op, static_cast<int64_t>(index));
    llvm::DenseSet<Value> seen;
    for (auto [r, value] : llvm::enumerate(returned->op->getOperands())) {
      auto updates = step.getResultAttrOfType<IntegerAttr>(
          r, graph::GraphDialect::kUpdatesAttrName);
      Operation *maker = value.getDefiningOp();
      if (!updates || !maker || !seen.insert(value).second ||
          !llvm::is_contained(arguments, updates.getInt()) ||
          !position.count(maker))
        continue;
      Value argument = step.getArgument(updates.getInt());
      if (argument.getType() != value.getType())
        continue;
      int64_t at = position[maker];
      unsigned output = llvm::cast<OpResult>(value).getResultNumber();
      const OpContract *contract = graph::contractOf(maker);
      int64_t replaced = contract ? contract->replacedOperand(output) : -1;
      bool safe = true;
      auto argumentReaders = readers.find(keyOf(argument, -1));
      ArrayRef<int64_t> reads;
      if (argumentReaders != readers.end())
        reads = argumentReaders->second;
      for (int64_t j : reads) {
        const RankItem &item = items[j];
        if (!item.op) {
          safe &= j < at;
          continue;
        }
        for (OpOperand &operand : item.op->getOpOperands()) {
          if (operand.get() != argument)
            continue;
          int64_t until = waitOf.count(j) ? std::max(j, waitOf[j]) : j;
          safe &= j == at ? static_cast<int64_t>(operand.getOperandNumber()) ==
                                replaced
                          : until < at;
        }
      }
      if (safe)
        report.persistentBytes -= bytesOf(value.getType());
    }
  }
  // A send's buffer is in use until its peer has received it: until the
  // wait of the receive it completes with (that receive's first reader),
  // else the end of the step.
  auto firstReader = [&](Value value, int64_t microBatch, int64_t after) {
    return readerAfter(keyOf(value, microBatch), after);
  };
  for (auto [index, item] : llvm::enumerate(items)) {
    if (item.op || !item.sends)
      continue;
    int64_t done = end;
    for (int64_t k = index + 1; k < end && item.completeWith >= 0; ++k) {
      const RankItem &recv = items[k];
      if (!recv.op && !recv.sends && recv.channel == item.completeWith &&
          recv.microBatch == item.microBatch) {
        done = firstReader(recv.value, recv.microBatch, k);
        break;
      }
    }
    auto it = lifetime.find(keyOf(item.value, item.microBatch));
    if (it != lifetime.end())
      it->second.second = std::max(it->second.second, done);
  }
  if (!withMemoryPlan)
    return report;
  // The arena as the runtime lays it out (layOutArena, Executor::planArena):
  // temporaries in the order they are made, a result that shares its
  // operand's bytes (a reshape: its op contract says so) in its operand's.
  DenseMap<Key, int64_t> idOf;
  std::vector<BufferSpan> buffers;
  for (const Key &key : order) {
    const auto &[first, last] = lifetime[key];
    idOf[key] = static_cast<int64_t>(buffers.size());
    buffers.push_back({bytesOf(key.first.getType()), first, last, false});
  }
  std::vector<std::pair<int64_t, int64_t>> aliases;
  for (const RankItem &item : items) {
    if (!item.op || item.op->getNumOperands() != 1 ||
        item.op->getNumResults() != 1)
      continue;
    const OpContract *contract =
        findOpContract(item.op->getName().stripDialect().str());
    if (!contract || !contract->effects.sharesOperandBytes)
      continue;
    auto from = idOf.find(keyOf(item.op->getOperand(0), item.microBatch));
    auto to = idOf.find(keyOf(item.op->getResult(0), item.microBatch));
    if (from != idOf.end() && to != idOf.end())
      aliases.emplace_back(from->second, to->second);
  }
  report.arenaBytes = layOutArena(std::move(buffers), aliases).bytes;
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
  return llvm::json::Object{
      {"parameters", parameterCount},
      {"flops", flops},
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
