//===- RankPlacement.cpp - Which pipeline ranks run each op ---------------===//

#include "trellis/Analysis/RankPlacement.h"

#include <algorithm>

namespace trellis {

RankPlacement placeOnRanks(const PlacementProblem &problem) {
  const std::vector<PlacementOp> &ops = problem.ops;
  int64_t ranks = std::max<int64_t>(problem.ranks, 1);
  RankPlacement placement;
  placement.virtualStages.assign(ops.size(), 0);
  placement.opRanks.assign(ops.size(), {});
  // Ops of a micro-batch, on their virtual stage's rank; a sum over
  // micro-batches in the action that made what it sums.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].action)
      continue;
    int64_t stage = ops[i].virtualStage;
    if (ops[i].summed >= 0 && ops[ops[i].summed].action)
      stage = ops[ops[i].summed].virtualStage;
    placement.virtualStages[i] = stage;
    placement.opRanks[i] = {stage % ranks};
  }
  auto addRanks = [](RankSet &into, const RankSet &from) {
    into.insert(from.begin(), from.end());
  };
  // What each result needs: an update or gradient where its parameter is
  // read inside micro-batches, anything else (the loss) on rank 0.
  size_t numArguments = problem.argumentReaders.size();
  std::vector<RankSet> resultNeeds(problem.results.size());
  for (size_t r = 0; r < problem.results.size(); ++r) {
    int64_t argument = problem.results[r].argument;
    if (argument < 0) {
      resultNeeds[r] = {0};
      continue;
    }
    if (static_cast<size_t>(argument) >= numArguments)
      continue;
    for (int64_t reader : problem.argumentReaders[argument])
      if (ops[reader].action)
        addRanks(resultNeeds[r], placement.opRanks[reader]);
  }
  // Where each value comes from: an action's rank; for a step op, where
  // its last operand made by an op comes from (none: no such operand). A
  // step op of scalar results runs there, so that a reduction runs where
  // what it reduces is made and a chain of scalars (the sums of every
  // stage's gradients added up) follows its operands from rank to rank:
  // only scalars travel.
  std::vector<RankSet> origin(ops.size());
  std::vector<bool> placed(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].action) {
      origin[i] = placement.opRanks[i];
      continue;
    }
    for (auto p = ops[i].producers.rbegin(); p != ops[i].producers.rend(); ++p)
      if (*p >= 0 && static_cast<size_t>(*p) < i && !origin[*p].empty()) {
        origin[i] = origin[*p];
        break;
      }
    if (ops[i].scalarResults && !origin[i].empty()) {
      placement.virtualStages[i] = ops[i].virtualStage;
      placement.opRanks[i] = origin[i];
      placed[i] = true;
    }
  }
  // Other step ops, last first: every rank a reader runs on, or that needs
  // a result they return.
  for (size_t i = ops.size(); i-- > 0;) {
    if (ops[i].action || placed[i])
      continue;
    placement.virtualStages[i] = ops[i].virtualStage;
    RankSet here;
    for (int64_t r : ops[i].returnedAs)
      addRanks(here, resultNeeds[r]);
    for (int64_t reader : ops[i].readers)
      addRanks(here, placement.opRanks[reader]);
    if (here.empty())
      here = {0};
    placement.opRanks[i] = std::move(here);
  }
  // Results where they are needed, or where they are made.
  placement.resultRanks.assign(problem.results.size(), {});
  for (size_t r = 0; r < problem.results.size(); ++r) {
    placement.resultRanks[r] = resultNeeds[r];
    if (placement.resultRanks[r].empty()) {
      int64_t producer = problem.results[r].producer;
      placement.resultRanks[r] =
          producer >= 0 ? placement.opRanks[producer] : RankSet{0};
    }
  }
  // Arguments where they are read, and where a result updating them lives;
  // one read by nothing stays on rank 0.
  placement.argumentRanks.assign(numArguments, {});
  for (size_t a = 0; a < numArguments; ++a)
    for (int64_t reader : problem.argumentReaders[a])
      addRanks(placement.argumentRanks[a], placement.opRanks[reader]);
  for (size_t r = 0; r < problem.results.size(); ++r) {
    const PlacementProblem::Result &result = problem.results[r];
    if (result.updates && result.argument >= 0 &&
        static_cast<size_t>(result.argument) < numArguments)
      addRanks(placement.argumentRanks[result.argument],
               placement.resultRanks[r]);
  }
  for (RankSet &holders : placement.argumentRanks)
    if (holders.empty())
      holders = {0};
  return placement;
}

} // namespace trellis
