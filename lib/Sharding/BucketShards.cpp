//===- BucketShards.cpp - Fused reduce_scatters and all_gathers -----------===//
//
// ZeRO's collectives in buckets: many reduce_scatters (gradients into their
// owners' pieces) or all_gathers (pieces into whole parameters) of one
// group become one collective over a [ranks, elements] matrix whose row r
// holds every member's piece r. Each member splits dimension 0, so its
// piece r is the contiguous run r of its elements: the rows are built by
// reshaping each member to [ranks, elements / ranks] and concatenating
// along dimension 1, and read back by slicing columns.
//
//===----------------------------------------------------------------------===//

#include "BucketShards.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

#include <map>

using namespace mlir;

namespace trellis::sharding {

namespace {

int64_t bytesOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  return type.getNumElements() * type.getElementTypeBitWidth() / 8;
}

/// The model part a collective belongs to: its own, else its operand
/// maker's.
graph::PartAttr partOf(Operation *op) {
  if (graph::PartAttr part = graph::getModelPart(op))
    return part;
  Operation *producer = op->getOperand(0).getDefiningOp();
  return producer ? graph::getModelPart(producer) : graph::PartAttr();
}

/// The bucket key of a collective: mesh, axes, kind, element type, and
/// (when `perPart`) its phase and model part.
template <typename CollectiveOp>
std::string keyOf(CollectiveOp op, bool perPart, StringRef kind) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << op.getMesh() << "|" << kind << "|"
     << op.getInput().getType().getElementType();
  for (StringRef axis : op.getAxisNames())
    os << "|" << axis;
  if (perPart)
    os << "|" << op->getAttr(graph::GraphDialect::kPhaseAttrName) << "|"
       << partOf(op);
  return key;
}

/// Position of the first op of `body` that uses `value`.
int64_t firstUse(Value value, const DenseMap<Operation *, int64_t> &position) {
  int64_t first = INT64_MAX;
  for (Operation *user : value.getUsers())
    first = std::min(first, position.lookup(user));
  return first;
}

/// Where a value becomes available: its producer's position (-1 for an
/// argument).
int64_t readyAt(Value value, const DenseMap<Operation *, int64_t> &position) {
  Operation *producer = value.getDefiningOp();
  return producer ? position.lookup(producer) : -1;
}

} // namespace

void bucketShardCollectives(Block &body, int64_t bucketBytes, bool perPart,
                            bool ofMicroBatches) {
  // A gradient padded for its reduce_scatter (a split that does not
  // divide) is padded as soon as it is made, so that its scatter may join
  // a bucket issued before the updates.
  SmallVector<graph::PadOp> pads;
  for (auto pad : body.getOps<graph::PadOp>())
    if (pad->hasOneUse() &&
        llvm::isa<ReduceScatterOp>(*pad->getUsers().begin()))
      pads.push_back(pad);
  for (graph::PadOp pad : pads)
    if (Operation *producer = pad.getInput().getDefiningOp())
      if (producer->getBlock() == &body && producer->isBeforeInBlock(pad) &&
          producer->getNextNode() != pad)
        pad->moveAfter(producer);
  DenseMap<Operation *, int64_t> position;
  for (auto [index, op] : llvm::enumerate(body))
    position[&op] = index;
  // Candidates by key, in block order: dimension 0 split evenly (padded
  // members were padded before), float elements.
  std::map<std::string, SmallVector<Operation *>> groups;
  // In a step of micro-batches a bucket stays within one phase and part:
  // one action program. Before a pipeline split, collectives of no part
  // (a tied weight's summed gradient, the step's updates) may belong to
  // another stage than any bucket: left alone.
  bool keyed = perPart || ofMicroBatches;
  for (Operation &op : body) {
    // Buckets join float tensors (concat); gathered ids (the experts each
    // token chose) go alone.
    if (!llvm::isa<ReduceScatterOp, AllGatherOp>(op) ||
        op.getAttrOfType<IntegerAttr>("dim").getInt() != 0 ||
        (perPart && !partOf(&op)) ||
        !llvm::isa<FloatType>(
            llvm::cast<RankedTensorType>(op.getOperand(0).getType())
                .getElementType()))
      continue;
    if (auto scatter = llvm::dyn_cast<ReduceScatterOp>(op)) {
      // Gradients scattered in the backward (ZeRO-2 and 3) are bucketed per
      // part, so each part's full gradients die once it is done; the
      // step's (ZeRO-1) by size alone.
      bool inBackward = op.hasAttr(graph::GraphDialect::kPhaseAttrName);
      if (readyAt(scatter.getInput(), position) >= 0)
        groups["rs|" + keyOf(scatter, keyed || inBackward,
                             stringifyReductionKind(scatter.getKind()))]
            .push_back(&op);
    } else {
      // A gather bucket never spans phases or parts: each part gathers its
      // own parameters (ZeRO-3's unit, FSDP's), once per phase.
      groups["ag|" + keyOf(llvm::cast<AllGatherOp>(op), true, "")].push_back(
          &op);
    }
  }
  for (auto &[key, ops] : groups) {
    bool scatters = key.rfind("rs|", 0) == 0;
    // A scatter bucket is issued after its last operand is made, a gather
    // bucket where its first member was (its members' operands must be
    // ready by then); every member's result is read after the issue.
    SmallVector<Operation *> bucket;
    int64_t bytes = 0, issueAt = -1, firstRead = INT64_MAX;
    auto flush = [&]() {
      if (bucket.size() >= 2)
        emitShardBucket(bucket, scatters, position);
      bucket.clear();
      bytes = 0;
      issueAt = -1;
      firstRead = INT64_MAX;
    };
    for (Operation *op : ops) {
      Value input = op->getOperand(0);
      int64_t ready = readyAt(input, position);
      int64_t use = firstUse(op->getResult(0), position);
      bool fits =
          scatters ? std::max(issueAt, ready) < std::min(firstRead, use)
                   : ready < issueAt && issueAt < std::min(firstRead, use);
      if (!bucket.empty() && !fits)
        flush();
      if (bucket.empty())
        issueAt = scatters ? ready : position.lookup(op);
      bucket.push_back(op);
      bytes += bytesOf(scatters ? input : op->getResult(0));
      if (scatters)
        issueAt = std::max(issueAt, ready);
      firstRead = std::min(firstRead, use);
      if (bytes >= bucketBytes)
        flush();
    }
    flush();
  }
}

void emitShardBucket(ArrayRef<Operation *> bucket, bool scatters,
                     const DenseMap<Operation *, int64_t> &position) {
  // Issued after the last operand is made (scatters), or where the first
  // member was (gathers, whose operands are ready by then).
  Operation *anchor = bucket.front();
  for (Operation *op : bucket) {
    Operation *producer = op->getOperand(0).getDefiningOp();
    if (scatters && producer &&
        (anchor == bucket.front() ||
         position.lookup(producer) > position.lookup(anchor)))
      anchor = producer;
  }
  // What the bucket inserts runs in its members' micro-batch phase and
  // model part.
  struct Copier : public OpBuilder::Listener {
    Operation *source;
    void notifyOperationInserted(Operation *op,
                                 OpBuilder::InsertPoint) override {
      graph::copyPlacement(source, op);
    }
  } copier;
  copier.source = bucket.front();
  OpBuilder builder(anchor->getContext(), &copier);
  if (scatters)
    builder.setInsertionPointAfter(anchor);
  else
    builder.setInsertionPoint(anchor);
  Operation *first = bucket.front();
  Location loc = first->getLoc();
  auto axes = first->getAttrOfType<ArrayAttr>("axes");
  auto mesh = first->getAttrOfType<FlatSymbolRefAttr>("mesh");
  int64_t ranks = groupSizeOf(first);
  // Each member as [ranks, elements / ranks] (scatters: the whole input;
  // gathers: the piece as one row).
  SmallVector<Value> rows;
  SmallVector<int64_t> widths;
  for (Operation *op : bucket) {
    Value input = op->getOperand(0);
    int64_t count =
        llvm::cast<RankedTensorType>(input.getType()).getNumElements();
    int64_t width = scatters ? count / ranks : count;
    widths.push_back(width);
    rows.push_back(graph::ReshapeOp::create(
        builder, loc, input,
        ArrayRef<int64_t>{scatters ? ranks : 1, width}));
  }
  int64_t total = 0;
  for (int64_t width : widths)
    total += width;
  Value joined = graph::ConcatOp::create(builder, loc, rows, 1);
  auto element =
      llvm::cast<RankedTensorType>(joined.getType()).getElementType();
  Value fused;
  if (scatters) {
    auto scatter = llvm::cast<ReduceScatterOp>(first);
    fused = ReduceScatterOp::create(
        builder, loc, RankedTensorType::get({1, total}, element), joined, mesh,
        axes, builder.getI64IntegerAttr(0), scatter.getKindAttr());
  } else {
    fused = AllGatherOp::create(builder, loc,
                                RankedTensorType::get({ranks, total}, element),
                                joined, mesh, axes,
                                builder.getI64IntegerAttr(0));
  }
  // Build every replacement before erasing anything.
  SmallVector<Value> replacements;
  int64_t offset = 0;
  int64_t height = scatters ? 1 : ranks;
  for (auto [op, width] : llvm::zip(bucket, widths)) {
    Value piece = graph::SliceOp::create(builder, loc, fused,
                                         ArrayRef<int64_t>{0, offset},
                                         ArrayRef<int64_t>{height, width});
    auto type = llvm::cast<RankedTensorType>(op->getResult(0).getType());
    auto reshaped = graph::ReshapeOp::create(builder, loc, piece, type.getShape());
    // The layout a pipeline split reads (trellis.layout) stays.
    if (Attribute layout = op->getAttr(TrellisDialect::kLocalLayoutAttrName))
      reshaped->setAttr(TrellisDialect::kLocalLayoutAttrName, layout);
    replacements.push_back(reshaped);
    offset += width;
  }
  for (auto [op, replacement] : llvm::zip(bucket, replacements)) {
    op->getResult(0).replaceAllUsesWith(replacement);
    op->erase();
  }
}

} // namespace trellis::sharding
