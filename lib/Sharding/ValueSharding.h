//===- ValueSharding.h - Shardings as mutable values ------------*- C++ -*-===//
//
// The working form of a #trellis.sharding inside the sharding passes, and
// the factor resolution that propagation and partitioning share.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_SHARDING_VALUESHARDING_H
#define TRELLIS_LIB_SHARDING_VALUESHARDING_H

#include "trellis/Dialect/Graph/IR/GraphInterfaces.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

namespace trellis::sharding {

using AxisNames = llvm::SmallVector<mlir::StringAttr>;

struct ValueSharding {
  /// Per dimension, the axes it is split over (first most significant).
  llvm::SmallVector<AxisNames> dims;
  /// Axes over which the value is partial, and how partials combine.
  AxisNames partial;
  ReductionKind partialKind = ReductionKind::Sum;

  static ValueSharding replicated(size_t rank) {
    ValueSharding sharding;
    sharding.dims.resize(rank);
    return sharding;
  }
  static ValueSharding fromAttr(ShardingAttr attr);
  ShardingAttr toAttr(mlir::MLIRContext *context,
                      mlir::FlatSymbolRefAttr mesh) const;

  bool usesAxis(mlir::StringAttr axis) const;
  bool isReplicated() const;
  bool operator==(const ValueSharding &other) const {
    return dims == other.dims && partial == other.partial &&
           (partial.empty() || partialKind == other.partialKind);
  }
};

/// The product of the sizes of `axes` in `mesh`.
int64_t axesSize(MeshAttr mesh, llvm::ArrayRef<mlir::StringAttr> axes);

/// The per-rank shape of `globalShape` under `sharding` (a split that does
/// not divide rounds up: the last pieces are padded).
llvm::SmallVector<int64_t> localShape(MeshAttr mesh,
                                      llvm::ArrayRef<int64_t> globalShape,
                                      const ValueSharding &sharding);

/// The axes of each factor of `rule`, read from the tensors that already
/// have them (`tensors`: operands then results, null where unknown). A
/// factor takes the axes of the first dimension mapped to it that is split,
/// if the factor's size divides by their size in `mesh` (or the rule is
/// paddable and one axis splits it), or of a later one
/// whose axes extend those (["tp"], then ["tp", "dp"]: the finer split);
/// whole factors never take any; an axis serves one factor at most.
llvm::SmallVector<AxisNames>
resolveFactors(const graph::ShardingRule &rule,
               llvm::ArrayRef<const ValueSharding *> tensors, MeshAttr mesh);

/// The sharding `factorAxes` imply for a tensor whose dimensions map to
/// `factors` (kNoFactor and unsplit factors: whole).
ValueSharding projectFactors(llvm::ArrayRef<int64_t> factors,
                             llvm::ArrayRef<AxisNames> factorAxes);

/// The axes over which result `resultIndex` is partial: those of split
/// factors that some operand has and the result lacks.
AxisNames partialAxes(const graph::ShardingRule &rule,
                      llvm::ArrayRef<AxisNames> factorAxes, size_t resultIndex);

/// For a linear op: the axes over which every operand is a partial sum
/// (all the same), which the results then inherit; empty otherwise.
AxisNames inheritedPartial(const graph::ShardingRule &rule,
                           llvm::ArrayRef<const ValueSharding *> operands);

/// Sets `result`'s partial axes (and kind): those of `partialAxes` plus
/// `inherited`, except axes the result's dimensions are split over.
void setResultPartial(const graph::ShardingRule &rule,
                      llvm::ArrayRef<AxisNames> factorAxes,
                      const AxisNames &inherited, size_t resultIndex,
                      ValueSharding &result);

} // namespace trellis::sharding

#endif // TRELLIS_LIB_SHARDING_VALUESHARDING_H
