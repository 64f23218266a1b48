//===- GraphContract.h - Graph ops and the plan op contract -----*- C++ -*-===//
//
// Graph ops are plan ops: each one's result types come from its contract in
// trellis/Common/OpContract.h (the table the runtime validates plans with),
// and its inherent attributes are the plan instruction's attributes.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHCONTRACT_H
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHCONTRACT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Operation.h"
#include "trellis/Common/OpContract.h"

#include <optional>
#include <type_traits>

namespace trellis::graph {

/// The plan op a graph op becomes: its mnemonic, except `microbatch_sum`,
/// which is `accumulate`.
llvm::StringRef planOpName(llvm::StringRef mnemonic);

/// An inherent attribute as the contract (and the plan) holds it; nullopt
/// if it has no plan form.
std::optional<trellis::AttrValue> toContractAttr(mlir::Attribute attr);

/// The contract's element type of an MLIR type; nullopt for others.
std::optional<trellis::ElementType> toElementType(mlir::Type type);
mlir::Type fromElementType(mlir::MLIRContext *context,
                           trellis::ElementType type);

/// Result types of plan op `planName` for `operands`, from the op
/// contract; emits its diagnostic at `loc` on failure. The contract's
/// attributes are read from `inherent` (the op's properties) or else from
/// `attributes` (where the parser holds them until after inference).
mlir::LogicalResult inferFromContract(llvm::StringRef planName,
                                      mlir::MLIRContext *context,
                                      std::optional<mlir::Location> loc,
                                      mlir::ValueRange operands,
                                      mlir::DictionaryAttr inherent,
                                      mlir::DictionaryAttr attributes,
                                      llvm::SmallVectorImpl<mlir::Type> &types);

/// The row of the plan op table a graph op is, or null for other ops.
const trellis::OpContract *contractOf(mlir::Operation *op);

/// Whether `op` is an optimizer update (its row replaces operands).
bool isUpdate(mlir::Operation *op);

/// Whether `op` adds a micro-batch's value into a total of the step
/// (graph.microbatch_sum, graph.matmul_accumulate: rows that accumulate):
/// it runs with the micro-batch's ops, but its result is the step's.
bool makesStepTotal(mlir::Operation *op);

/// The inherent attributes of an op being built or parsed, as a
/// dictionary (those not set yet are absent).
template <typename OpT, typename AdaptorT>
mlir::DictionaryAttr inherentAttributes(mlir::MLIRContext *context,
                                        AdaptorT &adaptor) {
  if constexpr (std::is_same_v<typename OpT::Properties,
                               mlir::EmptyProperties>)
    return mlir::DictionaryAttr::get(context, {});
  else
    return llvm::dyn_cast_or_null<mlir::DictionaryAttr>(
        OpT::getPropertiesAsAttr(context, adaptor.getProperties()));
}

/// The trait of graph ops whose result types come from their row
/// (Graph_InferTypeFromContract in GraphOps.td defines inferReturnTypes).
template <typename ConcreteType>
class InferTypeFromContract
    : public mlir::OpTrait::TraitBase<ConcreteType, InferTypeFromContract> {};

} // namespace trellis::graph

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHCONTRACT_H
