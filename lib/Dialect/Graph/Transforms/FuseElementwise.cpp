//===- FuseElementwise.cpp - Elementwise trees as fused_elementwise -------===//
//
// Grows a tree from each elementwise root (walking the block backwards, so
// the largest trees form first) through operands made by elementwise ops
// that nothing else reads, then replaces the tree by one
// graph.fused_elementwise whose program lists the members in block order.
//
//===----------------------------------------------------------------------===//

#include "trellis/Dialect/Graph/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "trellis/Dialect/Graph/IR/GraphContract.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <cstdio>

namespace trellis::graph {
#define GEN_PASS_DEF_FUSEELEMENTWISEPASS
#include "trellis/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace trellis::graph

using namespace mlir;
using namespace trellis::graph;

namespace {

/// The op table's fusible rows (binary and unary functions, scale,
/// unary_grad, cast): what a fused_elementwise program can hold.
bool isMember(Operation *op) {
  const trellis::OpContract *row = contractOf(op);
  return row && row->fusible;
}

/// The attributes that place an op in a program: a tree's members share
/// them.
bool samePlacement(Operation *a, Operation *b) {
  for (StringRef name : {StringRef(GraphDialect::kPhaseAttrName),
                         StringRef(GraphDialect::kPartAttrName),
                         StringRef("trellis.stage"),
                         StringRef("trellis.program")})
    if (a->getAttr(name) != b->getAttr(name))
      return false;
  return true;
}

ArrayRef<int64_t> shapeOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getShape();
}

/// One member's instruction, its operands named by slot.
std::string instructionOf(Operation *op, ArrayRef<int> slots) {
  std::string text;
  auto slot = [&](int index) { return " %" + std::to_string(slots[index]); };
  if (auto grad = llvm::dyn_cast<UnaryGradOp>(op)) {
    text = "unary_grad " + stringifyUnaryFunction(grad.getFunction()).str() +
           slot(0) + slot(1);
  } else if (auto cast = llvm::dyn_cast<CastOp>(op)) {
    text = "cast " + cast.getTo().str() + slot(0);
  } else if (auto scale = llvm::dyn_cast<ScaleOp>(op)) {
    // 17 significant digits: the double reads back exactly.
    double factor = scale.getFactor().convertToDouble();
    char printed[40];
    std::snprintf(printed, sizeof(printed), " %.17g", factor);
    text = "scale" + slot(0) + printed;
  } else {
    text = op->getName().stripDialect().str();
    for (size_t i = 0; i < slots.size(); ++i)
      text += slot(i);
  }
  return text;
}

struct FuseElementwisePass
    : public trellis::graph::impl::FuseElementwisePassBase<
          FuseElementwisePass> {
  void runOnOperation() override {
    getOperation()->walk([&](FunctionOpInterface function) {
      for (Block &block : function.getFunctionBody())
        fuseBlock(block);
    });
  }

  void fuseBlock(Block &block) {
    llvm::DenseSet<Operation *> fused;
    SmallVector<Operation *> roots;
    for (Operation &op : llvm::reverse(block))
      if (isMember(&op))
        roots.push_back(&op);
    for (Operation *root : roots) {
      if (fused.contains(root))
        continue;
      // The tree: members that feed only it, same shape and placement.
      llvm::SetVector<Operation *> members;
      members.insert(root);
      SmallVector<Operation *> worklist = {root};
      ArrayRef<int64_t> shape = shapeOf(root->getResult(0));
      while (!worklist.empty()) {
        Operation *member = worklist.pop_back_val();
        for (Value operand : member->getOperands()) {
          Operation *producer = operand.getDefiningOp();
          if (!producer || producer->getBlock() != &block ||
              !isMember(producer) || fused.contains(producer) ||
              members.contains(producer) || !operand.hasOneUse() ||
              shapeOf(operand) != shape || !samePlacement(producer, root))
            continue;
          members.insert(producer);
          worklist.push_back(producer);
        }
      }
      if (members.size() < 2)
        continue;
      // Members in block order; the outside operands as inputs, in order
      // of first use.
      SmallVector<Operation *> ordered(members.begin(), members.end());
      llvm::sort(ordered, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
      llvm::SetVector<Value> inputs;
      for (Operation *member : ordered)
        for (Value operand : member->getOperands())
          if (!members.contains(operand.getDefiningOp()))
            inputs.insert(operand);
      llvm::DenseMap<Value, int> slotOf;
      for (auto [index, input] : llvm::enumerate(inputs))
        slotOf[input] = static_cast<int>(index);
      SmallVector<Attribute> program;
      OpBuilder builder(root);
      for (Operation *member : ordered) {
        SmallVector<int> slots;
        for (Value operand : member->getOperands())
          slots.push_back(slotOf.lookup(operand));
        program.push_back(
            builder.getStringAttr(instructionOf(member, slots)));
        slotOf[member->getResult(0)] = static_cast<int>(slotOf.size());
      }
      auto fusedOp = FusedElementwiseOp::create(
          builder, root->getLoc(), inputs.getArrayRef(),
          builder.getArrayAttr(program));
      fusedOp->setDiscardableAttrs(root->getDiscardableAttrDictionary());
      if (fusedOp.getResult().getType() != root->getResult(0).getType()) {
        fusedOp->emitOpError() << "fusion changed the result type from "
                               << root->getResult(0).getType() << " to "
                               << fusedOp.getResult().getType();
        return signalPassFailure();
      }
      root->getResult(0).replaceAllUsesWith(fusedOp.getResult());
      for (Operation *member : llvm::reverse(ordered)) {
        fused.insert(member);
        member->erase();
      }
    }
  }
};

} // namespace
