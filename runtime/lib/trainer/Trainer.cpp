//===- Trainer.cpp - Training loop over a plan ----------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "trellis/Common/SequenceChunks.h"
#include "trellis/Runtime/HostCollectives.h"
#include "trellis/Runtime/Initializer.h"
#include "trellis/Runtime/ShardLayout.h"
#include "trellis/Runtime/TokenSource.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trellis::runtime {

int64_t Trainer::rank() const {
  return communicator_ ? communicator_->rank() : 0;
}

Status Trainer::scatterInput(int64_t argument,
                             const std::vector<int32_t> &global,
                             int64_t firstRow) {
  const Plan &p = executor_->plan();
  if (!p.holds(p.arguments[argument].stages))
    return Status::success();
  const Tensor &tensor = executor_->argument(argument);
  ShardLayout layout = ShardLayout::of(
      tensor.shape(), p.arguments[argument].sharding, planMesh(p), rank());
  std::vector<int32_t> local(tensor.size());
  int64_t offset = firstRow * seq_;
  // A zigzag input stores at index s the token of position
  // sequencePosition(s): global element g = row * seq + s reads there.
  int64_t chunks = p.arguments[argument].sequenceChunks;
  layout.forEach([&](int64_t l, int64_t g) {
    int64_t row = g / seq_, s = g % seq_;
    local[l] =
        global[offset + row * seq_ + sequencePosition(s, seq_, chunks)];
  });
  return executor_->writeArgument(argument, local.data());
}

Trainer::~Trainer() = default;

Status Trainer::step() {
  if (!data_)
    return Status::error("this trainer has no data source: its caller "
                         "passes each step's tokens and targets");
  std::vector<int32_t> tokens(batch_ * seq_), targets(batch_ * seq_);
  TRELLIS_RETURN_IF_ERROR(data_->fill({completedSteps_, dataPosition_}, batch_,
                                      seq_, tokens.data(), targets.data()));
  return step(tokens.data(), targets.data());
}

Status Trainer::checkBatch(const int32_t *tokenIds,
                           const int32_t *targetIds) const {
  int64_t count = batch_ * seq_;
  // An id outside the vocabulary would index past the embedding table.
  for (auto [ids, what] : {std::pair{tokenIds, "tokens"},
                           std::pair{targetIds, "targets"}})
    for (int64_t i = 0; i < count; ++i)
      if (ids[i] < 0 || ids[i] >= vocab_)
        return Status::error(
            std::string("step ") + std::to_string(completedSteps_ + 1) +
            ": " + what + "[" + std::to_string(i / seq_) + ", " +
            std::to_string(i % seq_) + "] is " + std::to_string(ids[i]) +
            ": expected a token id in [0, " + std::to_string(vocab_) + ")");
  return Status::success();
}

Status Trainer::writeBatch(const int32_t *tokenIds, const int32_t *targetIds) {
  TRELLIS_RETURN_IF_ERROR(checkBatch(tokenIds, targetIds));
  int64_t count = batch_ * seq_;
  std::vector<int32_t> tokens(tokenIds, tokenIds + count),
      targets(targetIds, targetIds + count);
  int64_t rows = batch_ / static_cast<int64_t>(tokensArgs_.size());
  for (size_t i = 0; i < tokensArgs_.size(); ++i) {
    TRELLIS_RETURN_IF_ERROR(scatterInput(tokensArgs_[i], tokens, i * rows));
    TRELLIS_RETURN_IF_ERROR(scatterInput(targetsArgs_[i], targets, i * rows));
  }
  return Status::success();
}

StatusOr<double> Trainer::evaluate(int64_t batches) {
  if (!evalData_)
    return Status::error("this trainer has no held-out data (--eval-data)");
  float trainingLoss = lastLoss_;
  std::vector<int32_t> tokens(batch_ * seq_), targets(batch_ * seq_);
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::string where = "evaluation batch " + std::to_string(b + 1);
    TRELLIS_RETURN_IF_ERROR(
        evalData_
            ->fill({b, b * batch_}, batch_, seq_, tokens.data(), targets.data())
            .withContext(where));
    TRELLIS_RETURN_IF_ERROR(
        writeBatch(tokens.data(), targets.data()).withContext(where));
    // The plan's forward-only program: the loss, no gradients, no update
    // (the step's arguments as the next step will have them).
    TRELLIS_RETURN_IF_ERROR(
        writeStepArguments(static_cast<float>(lossScale_.scale)));
    TRELLIS_RETURN_IF_ERROR(executor_->evaluate().withContext(where));
    TRELLIS_RETURN_IF_ERROR(collectLoss().withContext(where));
    if (!std::isfinite(lastLoss_))
      return Status::error(where + ": the loss is not finite (" +
                           std::to_string(lastLoss_) + ")");
    total += lastLoss_;
  }
  lastLoss_ = trainingLoss;
  return total / static_cast<double>(batches);
}

Status Trainer::step(const int32_t *tokenIds, const int32_t *targetIds) {
  TRELLIS_RETURN_IF_ERROR(writeBatch(tokenIds, targetIds));
  const Plan &plan = executor_->plan();
  // The rate the updates compute from the step count.
  if (schedule_)
    lastLearningRate_ = learningRateAt(*schedule_, optimizerSteps_ + 1);
  // An injected overflow (testing) scales this rank's loss to infinity.
  float scale = overflowNextStep_ ? std::numeric_limits<float>::infinity()
                                  : static_cast<float>(lossScale_.scale);
  overflowNextStep_ = false;
  // From here a failure may leave the step half applied.
  stateIntact_ = false;
  TRELLIS_RETURN_IF_ERROR(writeStepArguments(scale));
  TRELLIS_RETURN_IF_ERROR(executor_->run().withContext(
      "step " + std::to_string(completedSteps_ + 1)));
  std::string stepName = "step " + std::to_string(completedSteps_ + 1);
  bool update = true;
  if (lossScaleArg_ >= 0) {
    StatusOr<bool> finite = updatesAreFinite();
    if (!finite.ok())
      return finite.status().withContext(stepName);
    update = *finite;
    lossScale_.record(update);
  }
  lastSkipReason_.clear();
  if (onNonfinite_ != "continue") {
    // A loss-scaled plan skips overflowing updates itself: its loss alone
    // is checked.
    StatusOr<std::string> nonfinite = firstNonFinite(
        /*checkUpdates=*/lossScaleArg_ < 0, /*checkLoss=*/update);
    if (!nonfinite.ok())
      return nonfinite.status().withContext(stepName);
    if (!nonfinite->empty()) {
      if (onNonfinite_ == "stop")
        return Status::error(
            stepName + ": " + *nonfinite +
            "; stopped, and nothing of this step is saved (--on-nonfinite "
            "skip drops such updates, keeping a second copy of the "
            "parameters and optimizer states; continue applies them)");
      lastSkipReason_ = *nonfinite;
      update = false;
    }
  }
  if (update) {
    TRELLIS_RETURN_IF_ERROR(executor_->commitUpdates());
    ++optimizerSteps_;
  }
  for (StepMetric &metric : metrics_) {
    if (!plan.holds(plan.results[metric.result].stages))
      continue;
    int64_t elements = 1;
    for (int64_t extent : metric.shape)
      elements *= extent;
    metric.values.resize(elements);
    TRELLIS_RETURN_IF_ERROR(
        executor_->readResultValues(metric.result, metric.values.data()));
    metric.present = true;
  }
  TRELLIS_RETURN_IF_ERROR(collectLoss().withContext(stepName));
  ++completedSteps_;
  dataPosition_ += batch_;
  stateIntact_ = true;
  return Status::success();
}

Status Trainer::writeStepArguments(float lossScale) {
  const Plan &plan = executor_->plan();
  // The optimizer's step count (AdamW's bias correction) counts the
  // updates made: a step skipped for an overflow makes none.
  if (stepArg_ >= 0 && plan.holds(plan.arguments[stepArg_].stages)) {
    float step = static_cast<float>(optimizerSteps_ + 1);
    TRELLIS_RETURN_IF_ERROR(executor_->writeArgument(stepArg_, &step));
  }
  if (lossScaleArg_ >= 0 && plan.holds(plan.arguments[lossScaleArg_].stages))
    TRELLIS_RETURN_IF_ERROR(
        executor_->writeArgument(lossScaleArg_, &lossScale));
  return Status::success();
}

Status Trainer::collectLoss() {
  // The loss lives on the last stage; it is sent to the others.
  const Plan &plan = executor_->plan();
  if (!plan.results.empty() && plan.holds(plan.results.front().stages)) {
    StatusOr<float> loss = executor_->loss();
    if (!loss.ok())
      return loss.status();
    lastLoss_ = *loss;
  }
  return shareLoss();
}

Status Trainer::shareLoss() {
  const Plan &plan = executor_->plan();
  if (!communicator_ || plan.results.empty() ||
      plan.results.front().stages.empty() || !plan.pipelineAxis)
    return Status::success();
  // The maximum over the mesh, the ranks without the loss giving -inf:
  // every rank gets the holders' value exactly.
  float loss = plan.holds(plan.results.front().stages)
                   ? lastLoss_
                   : -std::numeric_limits<float>::infinity();
  TRELLIS_RETURN_IF_ERROR(allReduceHostValues(*device_, *communicator_,
                                              everyAxis(communicator_->mesh()),
                                              &loss, 1, ReduceKind::Max));
  lastLoss_ = loss;
  return Status::success();
}

std::string Trainer::fingerprint() const {
  uint64_t hash = 0;
  const Plan &plan = executor_->plan();
  for (const Argument &argument : plan.arguments) {
    if (argument.role != ArgumentRole::Param &&
        argument.role != ArgumentRole::State)
      continue;
    hash = mix64(hash ^ streamKey(0, argument.name));
    // Global shapes: a checkpoint serves every layout of the same model.
    for (int64_t size :
         ShardLayout::of(plan.buffers[argument.buffer].shape, argument.sharding,
                         planMesh(plan), rank(), argument.globalShape)
             .globalShape)
      hash = mix64(hash ^ static_cast<uint64_t>(size));
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(hash));
  return text;
}

void DynamicLossScale::record(bool finite) {
  if (!finite) {
    // The step is skipped on every rank alike, and the scale halves.
    scale = std::max(scale / 2, 1.0);
    cleanSteps = 0;
    ++skippedSteps;
    return;
  }
  if (++cleanSteps == kGrowthInterval) {
    scale *= 2;
    cleanSteps = 0;
  }
}

Status Trainer::minimumOverMesh(float *values, int64_t count) const {
  if (!communicator_)
    return Status::success();
  return allReduceHostValues(*device_, *communicator_,
                             everyAxis(communicator_->mesh()), values, count,
                             ReduceKind::Min);
}

StatusOr<std::string> Trainer::firstNonFinite(bool checkUpdates,
                                              bool checkLoss) const {
  // This rank's verdicts, then the mesh's: the loss (1 finite, 0 not) and
  // the first result in plan order whose update is not finite.
  const Plan &plan = executor_->plan();
  float verdict[2] = {1.0f, std::numeric_limits<float>::max()};
  float lossValue = 0;
  if (checkLoss && !plan.results.empty() &&
      plan.holds(plan.results.front().stages)) {
    StatusOr<float> loss = executor_->loss();
    if (!loss.ok())
      return loss.status();
    lossValue = *loss;
    verdict[0] = std::isfinite(lossValue) ? 1.0f : 0.0f;
  }
  // The updated weights, tested together (one verdict a step).
  std::vector<const Tensor *> updated;
  std::vector<size_t> updatedResults;
  for (size_t r = 0; checkUpdates && r < plan.results.size(); ++r) {
    const Result &result = plan.results[r];
    if (!result.updates || !plan.holds(result.stages))
      continue;
    ArgumentRole role = plan.arguments[*result.updates].role;
    if (role != ArgumentRole::Param && role != ArgumentRole::Master)
      continue;
    updated.push_back(&executor_->result(r));
    updatedResults.push_back(r);
  }
  if (!updated.empty()) {
    StatusOr<int64_t> first = executor_->device().firstNonFinite(updated);
    if (!first.ok())
      return first.status();
    if (*first >= 0)
      verdict[1] = static_cast<float>(updatedResults[*first]);
  }
  TRELLIS_RETURN_IF_ERROR(minimumOverMesh(verdict, 2));
  if (verdict[0] == 0.0f)
    return std::string("the loss is not finite") +
           (std::isfinite(lossValue) ? ""
                                     : std::isnan(lossValue) ? " (NaN)"
                                                             : " (infinite)");
  if (verdict[1] != std::numeric_limits<float>::max()) {
    const Result &result = plan.results[static_cast<size_t>(verdict[1])];
    return "the update of \"" + plan.arguments[*result.updates].name +
           "\" is not finite (its gradient overflowed or is NaN)";
  }
  return std::string();
}

StatusOr<bool> Trainer::updatesAreFinite() const {
  // The guard the updates applied by, where the plan has one (0 when they
  // applied, NaN when they kept the old values); else this rank's updated
  // parameters and moments. Then every rank's verdict (the minimum of
  // 1 = finite, 0 = not over the whole mesh).
  const Plan &plan = executor_->plan();
  if (int64_t guard = plan.updateGuardResult(); guard >= 0) {
    float finite = 1.0f;
    if (plan.holds(plan.results[guard].stages)) {
      float value = 0;
      TRELLIS_RETURN_IF_ERROR(executor_->readResultValues(guard, &value));
      finite = std::isfinite(value) ? 1.0f : 0.0f;
    }
    TRELLIS_RETURN_IF_ERROR(minimumOverMesh(&finite, 1));
    return finite == 1.0f;
  }
  std::vector<const Tensor *> updated;
  for (size_t r = 0; r < plan.results.size(); ++r)
    if (plan.results[r].updates && plan.holds(plan.results[r].stages))
      updated.push_back(&executor_->result(r));
  StatusOr<int64_t> first = executor_->device().firstNonFinite(updated);
  if (!first.ok())
    return first.status();
  float finite = *first < 0 ? 1.0f : 0.0f;
  TRELLIS_RETURN_IF_ERROR(minimumOverMesh(&finite, 1));
  return finite == 1.0f;
}

const StepMetric *Trainer::lastMetric(std::string_view name) const {
  for (const StepMetric &metric : metrics_)
    if (metric.present && metric.name == name)
      return &metric;
  return nullptr;
}

} // namespace trellis::runtime
