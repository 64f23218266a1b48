//===- StepReport.cpp - What one rank holds and sends per step ------------===//

#include "trellis/Analysis/StepReport.h"

#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
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

} // namespace

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

StepReport computeRankReport(func::FuncOp step, ArrayRef<int64_t> arguments,
                             ArrayRef<RankItem> items) {
  StepReport report;
  // Mixed precision: 16-bit parameters with fp32 masters, or f32
  // parameters cast to a 16-bit compute copy in the forward.
  bool mixed = false, adam = false;
  for (const RankItem &item : items)
    if (auto cast = llvm::dyn_cast_if_present<graph::CastOp>(item.op)) {
      auto source = llvm::dyn_cast<BlockArgument>(cast.getInput());
      auto role = source ? step.getArgAttrOfType<StringAttr>(
                               source.getArgNumber(),
                               graph::GraphDialect::kRoleAttrName)
                         : StringAttr();
      mixed |= role && role.getValue() == "param" &&
               cast.getResult().getType().getElementTypeBitWidth() == 16;
    }
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (auto role = step.getArgAttrOfType<StringAttr>(
            i, graph::GraphDialect::kRoleAttrName)) {
      adam |= role.getValue() == "adam_m";
      mixed |= role.getValue() == "master";
    }
  report.weightBytesPerParameter = mixed ? 2 : 4;
  report.gradientBytesPerParameter = mixed ? 2 : 4;
  report.optimizerBytesPerParameter = (adam ? 8 : 0) + (mixed ? 4 : 0);
  for (int64_t i : arguments) {
    auto role = step.getArgAttrOfType<StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    Type type = step.getArgumentTypes()[i];
    if (role && role.getValue() == "param") {
      report.parameterBytes += bytesOf(type);
      report.parameterCount +=
          llvm::cast<RankedTensorType>(type).getNumElements();
    } else if (role && role.getValue() != "input") {
      report.optimizerStateBytes += bytesOf(type);
    }
  }
  // Liveness in this rank's order: a value (of one micro-batch, or of the
  // step) lives from the item that makes (or receives) it to the last item
  // here that reads (or sends) it.
  using Key = std::pair<Value, int64_t>;
  auto keyOf = [](Value value, int64_t microBatch) -> Key {
    Operation *producer = value.getDefiningOp();
    bool perMicroBatch = producer &&
                         producer->hasAttr(graph::GraphDialect::kPhaseAttrName) &&
                         !llvm::isa<graph::MicrobatchSumOp>(producer);
    return {value, perMicroBatch ? microBatch : -1};
  };
  DenseMap<Key, std::pair<int64_t, int64_t>> lifetime;
  auto use = [&](Value value, int64_t microBatch, int64_t index) {
    auto it = lifetime.find(keyOf(value, microBatch));
    if (it != lifetime.end())
      it->second.second = std::max(it->second.second, index);
  };
  for (auto [index, item] : llvm::enumerate(items)) {
    int64_t at = static_cast<int64_t>(index);
    if (!item.op) {
      if (item.sends)
        use(item.value, item.microBatch, at);
      else
        lifetime.try_emplace(keyOf(item.value, item.microBatch), at, at);
      StepReport::Traffic &traffic =
          report.communication[(item.sends ? "send over " : "recv over ") +
                               item.axis];
      ++traffic.count;
      traffic.bytes += bytesOf(item.value.getType());
      continue;
    }
    Operation &op = *item.op;
    for (Value operand : op.getOperands())
      use(operand, item.microBatch, at);
    for (Value result : op.getResults())
      lifetime.try_emplace(keyOf(result, item.microBatch), at, at);
    // Collectives move data; slice_shard only keeps a local piece.
    if (op.getDialect() && llvm::isa<TrellisDialect>(op.getDialect()) &&
        op.getNumOperands() && !llvm::isa<SliceShardOp>(op)) {
      std::string key = op.getName().stripDialect().str();
      if (auto axes = op.getAttrOfType<ArrayAttr>("axes")) {
        key += " over";
        for (Attribute axis : axes)
          key += " " + llvm::cast<StringAttr>(axis).getValue().str();
      }
      StepReport::Traffic &traffic = report.communication[key];
      ++traffic.count;
      traffic.bytes += bytesOf(op.getOperand(0).getType());
    }
  }
  std::vector<int64_t> delta(items.size() + 1, 0);
  for (auto &[key, span] : lifetime) {
    delta[span.first] += bytesOf(key.first.getType());
    delta[span.second + 1] -= bytesOf(key.first.getType());
  }
  int64_t live = 0;
  for (int64_t change : delta) {
    live += change;
    report.peakActivationBytes = std::max(report.peakActivationBytes, live);
  }
  return report;
}

void StepReport::print(llvm::raw_ostream &os) const {
  os << llvm::formatv("parameters: {0} ({1}) per rank\n", parameterCount,
                      formatBytes(parameterBytes));
  os << llvm::formatv("optimizer state: {0} per rank\n",
                      formatBytes(optimizerStateBytes));
  int64_t perParameter = weightBytesPerParameter + gradientBytesPerParameter +
                         optimizerBytesPerParameter;
  os << llvm::formatv("model states: {0} bytes per parameter (weights {1} + "
                      "gradients {2} + optimizer {3})\n",
                      perParameter, weightBytesPerParameter,
                      gradientBytesPerParameter, optimizerBytesPerParameter);
  os << llvm::formatv("activations (peak live, estimate): {0} per rank\n",
                      formatBytes(peakActivationBytes));
  if (communication.empty()) {
    os << "communication per step: none\n";
    return;
  }
  os << "communication per step (per rank):\n";
  for (const auto &[key, traffic] : communication)
    os << llvm::formatv("  {0,-28} {1,5} calls  {2}\n", key, traffic.count,
                        formatBytes(traffic.bytes));
}

} // namespace trellis
