//===- GraphAttrs.h - Attributes of the graph dialect -----------*- C++ -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"
#include "trellis/Dialect/Graph/IR/GraphEnums.h"

#define GET_ATTRDEF_CLASSES
#include "trellis/Dialect/Graph/IR/GraphAttrs.h.inc"

namespace trellis::graph {

/// The model part `op` belongs to (its `graph.part`), or null when it
/// declares none. The one way to ask which part an op is in.
PartAttr getModelPart(mlir::Operation *op);

/// Marks `op` as belonging to `part`; a null `part` removes the mark.
void setModelPart(mlir::Operation *op, PartAttr part);

/// Gives `to` (an op a pass makes for `from`) the micro-batch phase
/// (graph.phase) and model part of `from`, where `from` has them: it runs
/// in the same action.
void copyPlacement(mlir::Operation *from, mlir::Operation *to);

/// The argument a training step's result belongs to: the one it updates
/// (graph.updates) or whose gradient it is (graph.gradient_of); -1 for
/// neither (the loss, metrics).
struct ResultArgument {
  int64_t argument = -1;
  bool updates = false;
};

/// `step`'s (a function's) result `index`'s argument.
ResultArgument getResultArgument(mlir::Operation *step, unsigned index);

/// A builder listener that marks every op its builder inserts with the
/// current part, unless the op declares one already (a clone keeps its
/// own) or the current part is null.
class ModelPartMarker : public mlir::OpBuilder::Listener {
public:
  void setPart(PartAttr part) { part_ = part; }
  PartAttr getPart() const { return part_; }

  void notifyOperationInserted(mlir::Operation *op,
                               mlir::OpBuilder::InsertPoint) override {
    if (part_ && !getModelPart(op))
      setModelPart(op, part_);
  }

private:
  PartAttr part_;
};

} // namespace trellis::graph

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_H
