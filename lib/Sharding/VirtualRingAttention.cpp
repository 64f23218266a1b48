//===- VirtualRingAttention.cpp - Ring attention in a written-down step ---===//
//
// What -trellis-lower-ring-attention (LowerRingAttention.cpp) does to the
// partitioned step, done to the step written down as data, op for op: the
// same ring steps, collectives and erasures, so that the query prices the
// ring the plan will run.
//
//===----------------------------------------------------------------------===//

#include "VirtualStep.h"

#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"

#include <map>
#include <tuple>

using namespace mlir;

namespace trellis::sharding {

namespace {

/// An attention (or its gradient) in the all-gather form: queries split
/// over `axes`, keys and values gathered from this rank's blocks.
struct GatheredAttention {
  int64_t query = -1, key = -1, value = -1;
  AxisNames axes;
  int64_t ranks = 1;
};

struct RingResult {
  int64_t result = -1, logSumExp = -1;
};

class RingWriter {
public:
  RingWriter(VirtualStep &step, MeshAttr mesh) : step_(step), mesh_(mesh) {}

  void run();

private:
  /// The local block `gathered` is the all_gather of along the sequence
  /// over `axes`, or -1.
  int64_t gatheredBlock(int64_t gathered, const AxisNames &axes) const;
  std::optional<GatheredAttention> match(const VirtualOp &op) const;
  /// A copy of the op at `index` when it is an attention (`gradient`: its
  /// gradient) in the all-gather form, with match_ set to its match.
  std::optional<VirtualOp> lowerable(size_t index, bool gradient);
  /// Adds an op of row `row` on `inputs`, in `anchor`'s micro-batch phase
  /// and stage; returns its results.
  SmallVector<int64_t> add(const VirtualOp &anchor, const char *row,
                           ArrayRef<int64_t> inputs, const AttrMap &attrs);
  int64_t permute(const VirtualOp &anchor, int64_t input);
  /// Marks the ops from `first` on as running where op `index` was.
  void markReplacing(size_t first, size_t index) {
    for (size_t op = first; op < step_.ops.size(); ++op)
      step_.ops[op].replaces = static_cast<int64_t>(index);
  }
  std::pair<int64_t, int64_t> passOn(const VirtualOp &anchor, int64_t step,
                                     int64_t key, int64_t value);
  RingResult forward(const VirtualOp &anchor);
  std::tuple<int64_t, int64_t, int64_t> backward(const VirtualOp &anchor,
                                                 const RingResult &forward,
                                                 int64_t resultGrad);
  /// Readers (ops not erased) of `value`.
  SmallVector<int64_t> readersOf(int64_t value) const;
  /// Every read of `from` (by an op not erased, or as a result) reads `to`.
  void replaceUses(int64_t from, int64_t to);
  /// The reduce_scatters (sum, along the sequence over `axes`) that bring
  /// `grad` home, or nullopt when another op reads it.
  std::optional<SmallVector<int64_t>> scattersHome(int64_t grad) const;

  VirtualStep &step_;
  MeshAttr mesh_;
  /// The match being lowered.
  GatheredAttention match_;
};

int64_t RingWriter::gatheredBlock(int64_t gathered,
                                  const AxisNames &axes) const {
  int64_t producer = step_.values[gathered].producer;
  if (producer < 0)
    return -1;
  const VirtualOp &op = step_.ops[producer];
  if (op.erased || !op.reshardStep ||
      op.reshardStep->kind != ReshardStep::Kind::AllGather ||
      op.reshardStep->axes != axes || op.reshardStep->dim != 1)
    return -1;
  return op.operands[0];
}

std::optional<GatheredAttention> RingWriter::match(const VirtualOp &op) const {
  if (op.sequenceAxes.empty() || op.operands.size() < 3)
    return std::nullopt;
  GatheredAttention match;
  match.axes = op.sequenceAxes;
  match.query = op.operands[0];
  match.key = gatheredBlock(op.operands[1], match.axes);
  match.value = gatheredBlock(op.operands[2], match.axes);
  if (match.key < 0 || match.value < 0)
    return std::nullopt;
  match.ranks = axesSize(mesh_, match.axes);
  return match;
}

SmallVector<int64_t> RingWriter::add(const VirtualOp &anchor, const char *row,
                                     ArrayRef<int64_t> inputs,
                                     const AttrMap &attrs) {
  const OpContract &contract = *findOpContract(row);
  std::vector<TensorType> types;
  for (int64_t input : inputs) {
    const HeldValue &value = step_.values[input];
    types.push_back(
        {std::vector<int64_t>(value.shape.begin(), value.shape.end()),
         graph::toElementType(value.elementType).value_or(ElementType::F32)});
  }
  std::vector<TensorType> results;
  // The lowering builds verified ops: these rows accept their operands.
  (void)inferResults(contract, OpInstance(types, attrs), results);
  VirtualOp op;
  op.origin = anchor.origin;
  op.action = anchor.action;
  op.virtualStage = anchor.virtualStage;
  op.operands.assign(inputs.begin(), inputs.end());
  op.cost = contract.cost(OpInstance(types, attrs, results));
  op.kernel = contract.name;
  int64_t index = static_cast<int64_t>(step_.ops.size());
  // The context, not a reference into step_.values: each result pushed
  // may move them.
  MLIRContext *context = step_.values[inputs[0]].elementType.getContext();
  for (const TensorType &type : results) {
    HeldValue value;
    value.producer = index;
    value.shape.assign(type.shape.begin(), type.shape.end());
    value.global = value.shape;
    value.elementType = graph::fromElementType(context, type.element);
    value.layout = ValueSharding::replicated(type.shape.size());
    step_.values.push_back(std::move(value));
    op.results.push_back(static_cast<int64_t>(step_.values.size()) - 1);
  }
  step_.ops.push_back(std::move(op));
  return step_.ops.back().results;
}

int64_t RingWriter::permute(const VirtualOp &anchor, int64_t input) {
  VirtualOp op;
  op.origin = anchor.origin;
  op.action = anchor.action;
  op.virtualStage = anchor.virtualStage;
  op.operands = {input};
  int64_t bytes = step_.values[input].bytes();
  op.collective = "collective_permute over";
  for (StringAttr axis : match_.axes)
    op.collective += " " + axis.getValue().str();
  op.traffic = {
      1, bytes,
      ringWireBytes("collective_permute", match_.ranks, bytes, bytes)};
  HeldValue value = step_.values[input];
  value.producer = static_cast<int64_t>(step_.ops.size());
  step_.values.push_back(std::move(value));
  op.results = {static_cast<int64_t>(step_.values.size()) - 1};
  step_.ops.push_back(std::move(op));
  return step_.ops.back().results[0];
}

std::pair<int64_t, int64_t> RingWriter::passOn(const VirtualOp &anchor,
                                               int64_t step, int64_t key,
                                               int64_t value) {
  if (step + 1 >= match_.ranks)
    return {-1, -1};
  int64_t nextKey = permute(anchor, key);
  return {nextKey, value == key ? nextKey : permute(anchor, value)};
}

/// The attributes of an attention step: those the rows require.
static AttrMap blockAttrs(int64_t shift) {
  AttrMap attrs;
  attrs["scale"].kind = AttrKind::Real;
  attrs["scale"].real = 1;
  attrs["shift"].kind = AttrKind::Int;
  attrs["shift"].integer = shift;
  return attrs;
}

RingResult RingWriter::forward(const VirtualOp &anchor) {
  int64_t key = match_.key, value = match_.value;
  RingResult ring;
  for (int64_t step = 0; step < match_.ranks; ++step) {
    auto [nextKey, nextValue] = passOn(anchor, step, key, value);
    SmallVector<int64_t> block =
        add(anchor, "attention_block", {match_.query, key, value},
            blockAttrs(step));
    if (step == 0) {
      ring = {block[0], block[1]};
    } else {
      SmallVector<int64_t> merged =
          add(anchor, "attention_merge",
              {ring.result, ring.logSumExp, block[0], block[1]}, AttrMap());
      ring = {merged[0], merged[1]};
    }
    key = nextKey;
    value = nextValue;
  }
  return ring;
}

std::tuple<int64_t, int64_t, int64_t>
RingWriter::backward(const VirtualOp &anchor, const RingResult &forward,
                     int64_t resultGrad) {
  int64_t key = match_.key, value = match_.value;
  int64_t queryGrad = -1, keyGrad = -1, valueGrad = -1;
  for (int64_t step = 0; step < match_.ranks; ++step) {
    auto [nextKey, nextValue] = passOn(anchor, step, key, value);
    int64_t arrivedKeyGrad = -1, arrivedValueGrad = -1;
    if (step > 0) {
      arrivedKeyGrad = permute(anchor, keyGrad);
      arrivedValueGrad = permute(anchor, valueGrad);
    }
    SmallVector<int64_t> block = add(anchor, "attention_block_grad",
                                     {match_.query, key, value, forward.result,
                                      forward.logSumExp, resultGrad},
                                     blockAttrs(step));
    if (step == 0) {
      queryGrad = block[0];
      keyGrad = block[1];
      valueGrad = block[2];
    } else {
      queryGrad = add(anchor, "add", {queryGrad, block[0]}, AttrMap())[0];
      keyGrad = add(anchor, "add", {arrivedKeyGrad, block[1]}, AttrMap())[0];
      valueGrad =
          add(anchor, "add", {arrivedValueGrad, block[2]}, AttrMap())[0];
    }
    key = nextKey;
    value = nextValue;
  }
  if (match_.ranks > 1) {
    keyGrad = permute(anchor, keyGrad);
    valueGrad = permute(anchor, valueGrad);
  }
  return {queryGrad, keyGrad, valueGrad};
}

SmallVector<int64_t> RingWriter::readersOf(int64_t value) const {
  SmallVector<int64_t> readers;
  for (auto [index, op] : llvm::enumerate(step_.ops))
    if (!op.erased && llvm::is_contained(op.operands, value))
      readers.push_back(index);
  return readers;
}

void RingWriter::replaceUses(int64_t from, int64_t to) {
  for (VirtualOp &op : step_.ops)
    if (!op.erased)
      for (int64_t &operand : op.operands)
        if (operand == from)
          operand = to;
  for (int64_t &result : step_.results)
    if (result == from)
      result = to;
}

std::optional<SmallVector<int64_t>>
RingWriter::scattersHome(int64_t grad) const {
  if (llvm::is_contained(step_.results, grad))
    return std::nullopt;
  SmallVector<int64_t> scatters = readersOf(grad);
  for (int64_t index : scatters) {
    const std::optional<ReshardStep> &step = step_.ops[index].reshardStep;
    if (!step || step->kind != ReshardStep::Kind::ReduceScatter ||
        step->axes != match_.axes || step->dim != 1 ||
        step->reduction != ReductionKind::Sum)
      return std::nullopt;
  }
  return scatters;
}

std::optional<VirtualOp> RingWriter::lowerable(size_t index, bool gradient) {
  const VirtualOp &op = step_.ops[index];
  bool kind = gradient ? llvm::isa<graph::AttentionGradOp>(op.origin)
                       : llvm::isa<graph::AttentionOp>(op.origin);
  if (op.erased || !kind || op.reshardStep)
    return std::nullopt;
  // With ALiBi slopes or sinks (operands past query, key, value and the
  // result's gradient), priced in the all-gather form: the ring moves the
  // same blocks and computes the same products.
  if (op.operands.size() > (gradient ? 4u : 3u))
    return std::nullopt;
  std::optional<GatheredAttention> found = match(op);
  if (!found)
    return std::nullopt;
  match_ = *found;
  return op;
}

void RingWriter::run() {
  // Forward rings by (query, gathered key, gathered value).
  std::map<std::tuple<int64_t, int64_t, int64_t>, RingResult> rings;
  SmallVector<int64_t> lowered;
  size_t count = step_.ops.size();
  for (size_t index = 0; index < count; ++index) {
    std::optional<VirtualOp> lowering = lowerable(index, /*gradient=*/false);
    if (!lowering)
      continue;
    const VirtualOp &anchor = *lowering;
    size_t made = step_.ops.size();
    RingResult ring = forward(anchor);
    markReplacing(made, index);
    rings[{anchor.operands[0], anchor.operands[1], anchor.operands[2]}] = ring;
    step_.ops[index].erased = true;
    replaceUses(anchor.results[0], ring.result);
    lowered.push_back(index);
  }
  for (size_t index = 0; index < count; ++index) {
    std::optional<VirtualOp> lowering = lowerable(index, /*gradient=*/true);
    if (!lowering)
      continue;
    const VirtualOp &anchor = *lowering;
    // (The pass refuses a gradient that is not scattered home: the step
    // then does not compile, and is priced in the all-gather form.)
    std::optional<SmallVector<int64_t>> keyScatters =
        scattersHome(anchor.results[1]);
    std::optional<SmallVector<int64_t>> valueScatters =
        scattersHome(anchor.results[2]);
    if (!keyScatters || !valueScatters)
      continue;
    auto ring = rings.find(
        {anchor.operands[0], anchor.operands[1], anchor.operands[2]});
    size_t made = step_.ops.size();
    RingResult forwardRing =
        ring != rings.end() ? ring->second : forward(anchor);
    auto [queryGrad, keyGrad, valueGrad] =
        backward(anchor, forwardRing, anchor.operands[3]);
    markReplacing(made, index);
    step_.ops[index].erased = true;
    replaceUses(anchor.results[0], queryGrad);
    for (auto [scatters, grad] :
         {std::pair{&*keyScatters, keyGrad}, {&*valueScatters, valueGrad}})
      for (int64_t scatter : *scatters) {
        step_.ops[scatter].erased = true;
        replaceUses(step_.ops[scatter].results[0], grad);
      }
    lowered.push_back(index);
  }
  // The gathers nothing reads any more.
  for (int64_t index : lowered)
    for (int64_t operand : step_.ops[index].operands) {
      int64_t producer = step_.values[operand].producer;
      if (producer < 0 || step_.ops[producer].erased ||
          !step_.ops[producer].reshardStep ||
          step_.ops[producer].reshardStep->kind != ReshardStep::Kind::AllGather)
        continue;
      if (readersOf(operand).empty() &&
          !llvm::is_contained(step_.results, operand))
        step_.ops[producer].erased = true;
    }
}

} // namespace

void lowerRingAttention(VirtualStep &virtualStep, MeshAttr mesh) {
  RingWriter(virtualStep, mesh).run();
}

} // namespace trellis::sharding
