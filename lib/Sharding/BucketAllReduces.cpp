//===- BucketAllReduces.cpp - Fused all_reduces issued when ready ---------===//

#include "trellis/Sharding/Passes.h"

#include "BucketShards.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

namespace trellis {
#define GEN_PASS_DEF_BUCKETALLREDUCESPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct BucketAllReducesPass
    : public trellis::impl::BucketAllReducesPassBase<BucketAllReducesPass> {
  using BucketAllReducesPassBase::BucketAllReducesPassBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    Block &body = function.getBody().front();
    if (!function->hasAttr(graph::GraphDialect::kMicroBatchesAttrName))
      sinkGradientCasts(body);
    // Position of every op, to order reductions by when their operand is
    // produced (block arguments first).
    DenseMap<Operation *, int64_t> position;
    for (auto [index, op] : llvm::enumerate(body))
      position[&op] = index;
    auto readyAt = [&](AllReduceOp op) -> int64_t {
      Operation *producer = op.getInput().getDefiningOp();
      return producer ? position.lookup(producer) : -1;
    };
    DenseSet<Operation *> loss = lossDependencies(function);

    // A step cut into pipeline stages later keeps each bucket within one
    // model part; reductions of a micro-batch stay where they are.
    bool pipelined = perPart;
    bool ofMicroBatches =
        function->hasAttr(graph::GraphDialect::kMicroBatchesAttrName);
    // Reductions by (mesh, axes, kind, element type) of float values
    // produced in this block.
    std::map<std::string, SmallVector<AllReduceOp>> groups;
    for (AllReduceOp op : body.getOps<AllReduceOp>()) {
      auto type = op.getInput().getType();
      // In a step of micro-batches, a reduction inside one (marked with
      // its phase) runs per micro-batch and stays where it is.
      // The loss's reductions stay alone: a forward-only evaluation
      // reduces the loss without any gradient.
      if (!llvm::isa<FloatType>(type.getElementType()) || readyAt(op) < 0 ||
          (ofMicroBatches &&
           op->hasAttr(graph::GraphDialect::kPhaseAttrName)) ||
          loss.contains(op))
        continue;
      std::string key;
      llvm::raw_string_ostream element(key);
      element << type.getElementType();
      key = op.getMesh().str() + "|" +
            stringifyReductionKind(op.getKind()).str() + "|" + key;
      for (StringRef axis : op.getAxisNames())
        key += "|" + axis.str();
      if (pipelined) {
        // Values of no part (the loss, a tied weight's summed gradient)
        // may live on other stages than any bucket: left alone.
        graph::PartAttr part =
            graph::getModelPart(op.getInput().getDefiningOp());
        if (!part)
          continue;
        key += "|part " + part.str();
      }
      groups[key].push_back(op);
    }
    for (auto &[key, ops] : groups) {
      llvm::stable_sort(ops, [&](AllReduceOp a, AllReduceOp b) {
        return readyAt(a) < readyAt(b);
      });
      // A bucket is issued after its last operand is produced, so every
      // member's result must be first used after that.
      SmallVector<AllReduceOp> bucket;
      int64_t bytes = 0, issueAt = -1, firstUse = INT64_MAX;
      for (AllReduceOp op : ops) {
        int64_t use = firstUseOf(op, position);
        if (!bucket.empty() &&
            std::max(issueAt, readyAt(op)) >= std::min(firstUse, use)) {
          emitBucket(bucket, readyAt);
          bucket.clear();
          bytes = 0;
          issueAt = -1;
          firstUse = INT64_MAX;
        }
        bucket.push_back(op);
        RankedTensorType type = op.getInput().getType();
        bytes += type.getNumElements() * type.getElementTypeBitWidth() / 8;
        issueAt = std::max(issueAt, readyAt(op));
        firstUse = std::min(firstUse, use);
        if (bytes >= bucketBytes) {
          emitBucket(bucket, readyAt);
          bucket.clear();
          bytes = 0;
          issueAt = -1;
          firstUse = INT64_MAX;
        }
      }
      emitBucket(bucket, readyAt);
    }
    // ZeRO's reduce_scatters and all_gathers, in buckets of their own.
    sharding::bucketShardCollectives(body, bucketBytes, pipelined,
                                     ofMicroBatches);
  }

  /// The ops of `function`'s body that its loss (result 0 when a scalar
  /// that is no update or gradient) depends on.
  static DenseSet<Operation *> lossDependencies(func::FuncOp function) {
    DenseSet<Operation *> found;
    Block &body = function.getBody().front();
    auto first =
        function.getNumResults() == 0
            ? RankedTensorType()
            : llvm::dyn_cast<RankedTensorType>(function.getResultTypes()[0]);
    if (!first || first.getRank() != 0 ||
        function.getResultAttr(0, graph::GraphDialect::kUpdatesAttrName) ||
        function.getResultAttr(0, "graph.gradient_of"))
      return found;
    SmallVector<Value> work = {body.getTerminator()->getOperand(0)};
    while (!work.empty()) {
      Operation *op = work.pop_back_val().getDefiningOp();
      if (op && op->getBlock() == &body && found.insert(op).second)
        llvm::append_range(work, op->getOperands());
    }
    return found;
  }

  /// A reduction can join a bucket only if its result is first used after
  /// the bucket is issued. A gradient reduced in the compute dtype is read
  /// at once by its cast back to f32 (graph.reduce_first): those casts move
  /// down to just before their own first user, so that the reductions of a
  /// backward can wait for each other.
  static void sinkGradientCasts(Block &body) {
    SmallVector<Operation *> candidates;
    for (AllReduceOp op : body.getOps<AllReduceOp>())
      for (Operation *user : op.getResult().getUsers())
        if (user->getBlock() == &body &&
            user->hasAttr(graph::GraphDialect::kReduceFirstAttrName))
          candidates.push_back(user);
    for (Operation *op : candidates) {
      Operation *first = nullptr;
      for (Operation *user : op->getResult(0).getUsers()) {
        Operation *inBody = body.findAncestorOpInBlock(*user);
        if (inBody && (!first || inBody->isBeforeInBlock(first)))
          first = inBody;
      }
      if (first && op->isBeforeInBlock(first))
        op->moveBefore(first);
    }
  }

  /// Position of the first op using `op`'s result.
  static int64_t firstUseOf(AllReduceOp op,
                            const DenseMap<Operation *, int64_t> &position) {
    int64_t first = INT64_MAX;
    for (Operation *user : op.getResult().getUsers())
      first = std::min(first, position.lookup(user));
    return first;
  }

  /// Replaces `bucket` by one all_reduce of its concatenated operands,
  /// placed after the last operand is produced.
  template <typename ReadyAt>
  void emitBucket(ArrayRef<AllReduceOp> bucket, ReadyAt readyAt) {
    if (bucket.size() < 2)
      return;
    AllReduceOp last =
        *llvm::max_element(bucket, [&](AllReduceOp a, AllReduceOp b) {
          return readyAt(a) < readyAt(b);
        });
    OpBuilder builder(last.getContext());
    builder.setInsertionPointAfter(last.getInput().getDefiningOp());
    Location loc = last.getLoc();
    SmallVector<Value> flat;
    for (AllReduceOp op : bucket) {
      int64_t count = op.getInput().getType().getNumElements();
      flat.push_back(op.getInput().getType().getRank() == 1
                         ? op.getInput()
                         : graph::ReshapeOp::create(builder, loc, op.getInput(),
                                                    ArrayRef<int64_t>{count})
                               .getResult());
    }
    Value joined = graph::ConcatOp::create(builder, loc, flat, 0);
    Value reduced = AllReduceOp::create(builder, loc, joined.getType(), joined,
                                        last.getMeshAttr(), last.getAxes(),
                                        last.getKindAttr());
    // Build every replacement before erasing anything: the insertion point
    // may sit right before one of the reductions being replaced.
    int64_t offset = 0;
    SmallVector<Value> replacements;
    for (AllReduceOp op : bucket) {
      RankedTensorType type = op.getInput().getType();
      int64_t count = type.getNumElements();
      Value piece = graph::SliceOp::create(builder, loc, reduced,
                                           ArrayRef<int64_t>{offset},
                                           ArrayRef<int64_t>{count});
      replacements.push_back(
          type.getRank() == 1
              ? piece
              : graph::ReshapeOp::create(builder, loc, piece, type.getShape())
                    .getResult());
      offset += count;
    }
    for (auto [index, op] : llvm::enumerate(bucket)) {
      AllReduceOp reduction = op;
      reduction.getResult().replaceAllUsesWith(replacements[index]);
      reduction.erase();
    }
  }
};

} // namespace
