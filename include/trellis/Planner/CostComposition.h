//===- CostComposition.h - A plan's cost from short models ------*- C++ -*-===//
//
// What makes the planner's search fast: the cost query of a plan (every op
// and collective of each pipeline rank, grouped by action, and the rank's
// memory terms) composed from compiles of the same model cut short, instead
// of a compile of the whole model per candidate.
//
// A model whose layers are all alike costs, per rank, its parts' costs: the
// embedding and the head where they sit, and each of its layers alike. So
// per local layout (tp, cp and its kind, sp, ep, recomputation, ZeRO stage,
// whether there is a pipeline, whether its schedule splits weight gradients,
// whether a step has one micro-batch) the composer compiles models of two
// and three layers on one rank (with a pipeline: three layers cut 1,1,1
// over three stages) and reads from the cost query:
//  - a layer's cost (one more layer; the middle stage without its
//    transfers), and what the first, middle and last stages or the one rank
//    cost besides their layers (transfers and tied weights included);
//  - each as a line in the micro-batch size (two sizes compiled: matmul
//    pieces grow in their token dimension, everything else in proportion)
//    and in 1/dp (two data-parallel degrees compiled: ZeRO's shards and the
//    ring formulas' (n-1)/n are lines in 1/n).
// A candidate is then priced for any dp, pp, schedule, chunks, micro-batch
// count and size by adding parts along the stage split the compiler itself
// would choose (its balancer, over the whole model's part costs).
//
// What cannot be composed (an MLIR model, layers that differ, pipelines of
// a loss pooled over all layers, a matmul whose pieces at the two sizes
// cannot be paired, a layout whose short compile fails) is reported so
// that the caller compiles the whole model.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_COSTCOMPOSITION_H
#define TRELLIS_PLANNER_COSTCOMPOSITION_H

#include "trellis/Planner/Planner.h"

#include <memory>

namespace trellis::planner {

/// A plan's cost query, as a whole-model compile would give it.
struct ComposedCost {
  /// One per pipeline rank (work, memory terms; `flops` and the bytes
  /// summed from the compute work; the per-collective `communication`
  /// summary is left empty: the planner prices collectives from the work).
  std::vector<ShardedStepCost> ranks;
  /// The mesh, major to minor.
  std::vector<MeshAxis> meshAxes;
  int64_t modelParameters = 0;
};

/// `choice`'s cost from a compile of the whole model (what composition
/// stands in for); nullopt with the compiler's first error.
std::optional<ComposedCost> compileWholeCost(const PlanRequest &request,
                                             const PlanChoice &choice,
                                             std::string &error);

class CostComposer {
public:
  /// A composer for `request`'s model, or null (with `why`) when its cost
  /// cannot be composed: an MLIR model, a config whose layers differ
  /// (sliding windows on some layers, dense and sparse MLPs mixed), or one
  /// that does not parse.
  static std::unique_ptr<CostComposer> create(const PlanRequest &request,
                                              std::string &why);
  ~CostComposer();

  /// `choice`'s cost, or nullopt with `error` when it cannot be composed
  /// (the caller then compiles the whole model). Thread-safe: compiles of
  /// short models are shared between callers.
  std::optional<ComposedCost> compose(const PlanChoice &choice,
                                      std::string &error);

  /// A bound no plan's predicted step time (StepTime.h) goes below: the
  /// compute of the average pipeline rank (every action on every
  /// micro-batch, and the step), without communication or bubble; nullopt
  /// when `choice`'s cost cannot be composed.
  std::optional<double> lowerBound(const PlanChoice &choice,
                                   const ClusterSpec &cluster);

  /// Compiles of short models made so far.
  int64_t compiles() const;

private:
  struct Impl;
  explicit CostComposer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_COSTCOMPOSITION_H
