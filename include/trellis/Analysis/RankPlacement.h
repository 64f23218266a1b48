//===- RankPlacement.h - Which pipeline ranks run each op -------*- C++ -*-===//
//
// The rules that place a step's ops on pipeline ranks: an op of a
// micro-batch on its virtual stage's rank (a micro-batch sum on the stage
// that makes what it sums); an op of the step whose results are scalars
// (a gradient's sum, a norm, a loss) where its last operand made by an op
// comes from, looking through the step ops that made it, so that only the
// scalar travels; any other op of the step on every rank that reads its
// results, or that needs a result it returns (an update or a gradient
// where its parameter is read, anything else, such as the loss, on rank
// 0); an argument on every rank that reads it or holds a result updating
// it. The pipeline split (-trellis-split-pipeline) and the cost query
// (priceVirtualStep) both place through placeOnRanks. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_RANKPLACEMENT_H
#define TRELLIS_ANALYSIS_RANKPLACEMENT_H

#include <cstdint>
#include <set>
#include <vector>

namespace trellis {

using RankSet = std::set<int64_t>;

/// An op of the step, by its index in the step's order.
struct PlacementOp {
  /// Runs in each micro-batch's action, on `virtualStage`; else once in
  /// the step.
  bool action = false;
  int64_t virtualStage = 0;
  /// A micro-batch sum: the op that makes the value it sums, or -1.
  int64_t summed = -1;
  /// The ops that read its results, and the step results it returns.
  std::vector<int64_t> readers;
  std::vector<int64_t> returnedAs;
  /// The ops that make its operands, in operand order (arguments left
  /// out), and whether every result is a scalar (rank 0).
  std::vector<int64_t> producers;
  bool scalarResults = false;
};

/// A step as the placement sees it.
struct PlacementProblem {
  /// The pipeline's ranks: virtual stage v runs on rank v % ranks.
  int64_t ranks = 1;
  std::vector<PlacementOp> ops;
  /// For each argument, the ops that read it.
  std::vector<std::vector<int64_t>> argumentReaders;
  /// For each result: the op that makes it (-1: an argument returned),
  /// the argument it updates or is the gradient of (-1: neither), and
  /// whether it updates that argument.
  struct Result {
    int64_t producer = -1;
    int64_t argument = -1;
    bool updates = false;
  };
  std::vector<Result> results;
};

/// Where everything runs and lives.
struct RankPlacement {
  /// Per op: its virtual stage (a micro-batch sum's is its producer's) and
  /// the ranks that run it.
  std::vector<int64_t> virtualStages;
  std::vector<RankSet> opRanks;
  /// Per result and per argument: the ranks that hold it.
  std::vector<RankSet> resultRanks;
  std::vector<RankSet> argumentRanks;
};

RankPlacement placeOnRanks(const PlacementProblem &problem);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_RANKPLACEMENT_H
