//===- Trainer.cpp - Training loop over a plan ----------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "trellis/Common/SequenceChunks.h"
#include "trellis/Runtime/HostCollectives.h"
#include "trellis/Runtime/Initializer.h"
#include "trellis/Runtime/Launcher.h"
#include "trellis/Runtime/Safetensors.h"
#include "trellis/Runtime/ShardLayout.h"
#include "trellis/Runtime/TokenSource.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

namespace trellis::runtime {

using json = nlohmann::json;

/// The input arguments of `stream` (`tokens`: one batch) or `tokens.0`, ...
/// (one per micro-batch), in micro-batch order; empty when they are missing,
/// mixed, or not numbered 0..m-1.
static std::vector<int64_t> microBatchInputs(const Plan &plan,
                                             const std::string &stream) {
  std::vector<int64_t> whole;
  std::vector<std::pair<int64_t, int64_t>> numbered; // (micro-batch, argument)
  for (size_t i = 0; i < plan.arguments.size(); ++i) {
    if (plan.arguments[i].role != ArgumentRole::Input)
      continue;
    std::optional<InputName> name = parseInputName(plan.arguments[i].name);
    if (!name || name->stream != stream)
      continue;
    if (name->microBatch < 0)
      whole.push_back(i);
    else
      numbered.emplace_back(name->microBatch, i);
  }
  if (!whole.empty())
    return whole.size() == 1 && numbered.empty() ? whole
                                                 : std::vector<int64_t>{};
  std::sort(numbered.begin(), numbered.end());
  std::vector<int64_t> arguments;
  for (auto [microBatch, argument] : numbered) {
    if (microBatch != static_cast<int64_t>(arguments.size()))
      return {};
    arguments.push_back(argument);
  }
  return arguments;
}

Trainer::Trainer(std::unique_ptr<Device> device,
                 std::unique_ptr<Communicator> communicator,
                 std::unique_ptr<Executor> executor,
                 std::unique_ptr<TokenSource> data)
    : device_(std::move(device)), communicator_(std::move(communicator)),
      executor_(std::move(executor)), data_(std::move(data)) {
  const Plan &p = executor_->plan();
  tokensArgs_ = microBatchInputs(p, "tokens");
  targetsArgs_ = microBatchInputs(p, "targets");
  schedule_ = p.learningRateSchedule();
  for (size_t i = 0; i < p.arguments.size(); ++i)
    if (p.arguments[i].role == ArgumentRole::Step)
      stepArg_ = i;
    else if (p.arguments[i].role == ArgumentRole::LossScale)
      lossScaleArg_ = i;
  for (size_t i = 0; i < p.results.size(); ++i)
    if (p.results[i].metric == "grad_norm")
      gradNormResult_ = i;
    else if (p.results[i].metric == "expert_load")
      expertLoadResult_ = i;
  if (!tokensArgs_.empty()) {
    // The data source produces the global batch; each rank takes its shard
    // of each micro-batch's rows.
    const Argument &tokens = p.arguments[tokensArgs_.front()];
    ShardLayout layout = ShardLayout::of(p.buffers[tokens.buffer].shape,
                                         tokens.sharding, planMesh(p), rank());
    batch_ =
        layout.globalShape.size() == 2
            ? layout.globalShape[0] * static_cast<int64_t>(tokensArgs_.size())
            : 0;
    seq_ = layout.globalShape.size() == 2 ? layout.globalShape[1] : 0;
  }
}

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

namespace {

/// What every rank must agree on (Communicator.h's JobFields): what they
/// train, on which data, for how long, and how they save and react to
/// faults; paths only as "given or not" (nodes may mount them apart).
JobFields jobFields(const TrainOptions &options, const Plan &plan,
                    const TokenSource *data, const TokenSource *evalData) {
  char crc[16];
  std::snprintf(crc, sizeof(crc), "crc32 %08x", plan.contentCrc32);
  std::string source = data ? data->identity() : "batches from the caller";
  if (data && options.data != "synthetic" && options.data != "repeat")
    source += " (" + options.dataDtype + ")";
  auto given = [](const std::string &path) {
    return path.empty() ? std::string("none") : std::string("given");
  };
  // The plan's settings one by one, before its checksum: two plans that
  // differ are named by the first setting they differ in ("plan's
  // optimizer.learning_rate"), not only by their checksums. The path it was
  // compiled from may differ between nodes.
  JobFields fields;
  std::function<void(const std::string &, const json &)> flatten =
      [&](const std::string &name, const json &value) {
        if (value.is_object()) {
          for (const auto &[key, inner] : value.items())
            flatten(name + "." + key, inner);
          return;
        }
        fields.emplace_back("plan's " + name.substr(1), value.dump());
      };
  json metadata =
      json::parse(plan.metadataJson, nullptr, /*allow_exceptions=*/false);
  if (metadata.is_object()) {
    metadata.erase("source");
    flatten("", metadata);
  }
  fields.emplace_back("plan's mesh", planMesh(plan).toString());
  JobFields rest = {
      {"plan", crc},
      {"seed", std::to_string(options.seed)},
      {"data", source},
      {"steps", std::to_string(options.steps)},
      {"weights", given(options.weightsPath)},
      {"checkpoint to resume", given(options.loadDir)},
      {"checkpoint saving", "--save " + given(options.saveDir) + ", every " +
                                std::to_string(options.saveEvery) + ", keep " +
                                std::to_string(options.keep)},
      {"--on-nonfinite", options.onNonfinite},
      {"evaluation", evalData ? evalData->identity() + ", " +
                                    std::to_string(options.evalBatches) +
                                    " batches every " +
                                    std::to_string(options.evalEvery) + " steps"
                              : std::string("none")},
  };
  fields.insert(fields.end(), rest.begin(), rest.end());
  return fields;
}

} // namespace

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(const TrainOptions &options) {
  StatusOr<Plan> plan = loadPlanFile(options.planPath);
  if (!plan.ok())
    return plan.status();
  return create(options, std::move(*plan));
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const TrainOptions &options,
                                                   Plan planValue) {
  StatusOr<const Backend *> backend = findBackend(options.device);
  if (!backend.ok())
    return backend.status();
  DeviceOptions deviceOptions;
  deviceOptions.threads = options.threads;
  deviceOptions.maxMemoryBytes = options.maxMemoryBytes;
  deviceOptions.ranksOnNode =
      options.rank < 0
          ? 1
          : (options.ranksOnNode > 0 ? options.ranksOnNode : options.nproc);
  deviceOptions.localRank =
      options.rank < 0
          ? 0
          : (options.localRank >= 0
                 ? options.localRank
                 : options.rank % std::max<int64_t>(options.nproc, 1));
  StatusOr<std::unique_ptr<Device>> device =
      (*backend)->createDevice(deviceOptions);
  if (!device.ok())
    return device.status();
  std::optional<Plan> plan(std::move(planValue));
  Mesh mesh = planMesh(*plan);
  if (options.rank < 0 && mesh.size() > 1)
    return Status::error("the plan's mesh " + mesh.toString() + " has " +
                         std::to_string(mesh.size()) +
                         " ranks: run it with --nproc " +
                         std::to_string(mesh.size()));
  if (!options.outerLauncher.empty() && options.worldSize != mesh.size())
    return Status::error("the plan's mesh " + mesh.toString() + " has " +
                         std::to_string(mesh.size()) + " ranks but " +
                         options.outerLauncher + " started " +
                         std::to_string(options.worldSize));
  std::vector<int64_t> tokens = microBatchInputs(*plan, "tokens");
  std::vector<int64_t> targets = microBatchInputs(*plan, "targets");
  if (tokens.empty() || tokens.size() != targets.size())
    return Status::error(
        "expected tokens and targets inputs (named tokens and targets, or "
        "tokens.0 ... and targets.0 ... per micro-batch), found " +
        std::to_string(tokens.size()) + " tokens and " +
        std::to_string(targets.size()) + " targets inputs");
  const BufferDesc &tokenDesc =
      plan->buffers[plan->arguments[tokens.front()].buffer];
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokenDesc.shape.size() != 2 ||
        plan->buffers[plan->arguments[tokens[i]].buffer].shape !=
            tokenDesc.shape ||
        plan->buffers[plan->arguments[targets[i]].buffer].shape !=
            tokenDesc.shape ||
        plan->arguments[tokens[i]].sharding !=
            plan->arguments[tokens.front()].sharding)
      return Status::error("expected tokens and targets of one shape "
                           "[batch, seq] and one layout in every micro-batch");
  // The vocabulary: from the metadata, else the class dimension of the
  // loss (plans compiled from hand-written MLIR carry no model metadata).
  int64_t vocab = plan->metadataInteger("vocab_size", 0);
  for (const StageProgram &stage : plan->stages)
    for (const ActionProgram &program : stage.programs)
      for (const Instruction &instruction : program.instructions)
        if (vocab < 1 && instruction.op == "cross_entropy")
          vocab = plan->buffers[instruction.inputs[0]].shape.back();
  if (vocab < 1)
    return Status::error("cannot tell the vocabulary size: the plan has no "
                         "vocab_size metadata and no cross_entropy");

  std::unique_ptr<TokenSource> data;
  if (options.callerBatches) {
    // Each step's batch comes from the caller.
  } else if (options.data == "synthetic" || options.data == "repeat") {
    data = makeSyntheticTokens(options.seed, vocab, options.data == "repeat");
  } else {
    StatusOr<std::unique_ptr<TokenSource>> file =
        openTokenData(options.data, options.dataDtype, options.dataOrder,
                      options.seed, vocab);
    if (!file.ok())
      return file.status();
    data = std::move(*file);
  }
  // Held-out windows, one after another from the start: the same batches
  // at every evaluation.
  std::unique_ptr<TokenSource> evalData;
  if (!options.evalData.empty()) {
    StatusOr<std::unique_ptr<TokenSource>> file = openTokenData(
        options.evalData, options.dataDtype, "sequential", options.seed, vocab);
    if (!file.ok())
      return file.status().withContext("--eval-data");
    evalData = std::move(*file);
  }
  std::unique_ptr<Communicator> communicator;
  if (options.rank >= 0) {
    // Every rank connects the groups of every stage, so that each group's
    // members all take part in building it.
    std::vector<AxisList> groups;
    for (const StageProgram &stage : plan->stages)
      for (const ActionProgram &program : stage.programs)
        for (const AxisList &axes : program.instructionAxes)
          if (!axes.empty() &&
              std::find(groups.begin(), groups.end(), axes) == groups.end())
            groups.push_back(axes);
    RendezvousOptions rendezvous;
    rendezvous.storeDir = options.rendezvousDir;
    rendezvous.storeHost = options.masterAddr;
    rendezvous.storePort = options.masterPort;
    rendezvous.hostname = options.hostname;
    rendezvous.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(options.timeoutSeconds * 1000));
    if (const char *token = std::getenv(kJobTokenVariable))
      rendezvous.jobToken = token;
    rendezvous.agreement =
        jobFields(options, *plan, data.get(), evalData.get());
    StatusOr<std::unique_ptr<Communicator>> connected = (*backend)->connect(
        **device, mesh, options.rank, groups, transferLinks(*plan), rendezvous);
    if (!connected.ok())
      return connected.status();
    communicator = std::move(*connected);
  }
  selectStage(*plan, stageOfRank(*plan, std::max<int64_t>(options.rank, 0)));
  // This rank runs one stage: the others' programs need no memory here.
  for (size_t s = 0; s < plan->stages.size(); ++s) {
    if (static_cast<int64_t>(s) == plan->stage)
      continue;
    int64_t live = plan->stages[s].liveMicroBatches;
    plan->stages[s] = StageProgram();
    plan->stages[s].liveMicroBatches = live;
  }
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(*plan), **device, communicator.get(),
                       /*updatesInPlace=*/options.onNonfinite != "skip");
  if (!executor.ok())
    return executor.status();
  TRELLIS_RETURN_IF_ERROR(initializeArguments(
      **executor, options.seed, std::max<int64_t>(options.rank, 0)));
  std::unique_ptr<Trainer> trainer(
      new Trainer(std::move(*device), std::move(communicator),
                  std::move(*executor), std::move(data)));
  trainer->onNonfinite_ = options.onNonfinite;
  trainer->evalData_ = std::move(evalData);
  trainer->vocab_ = vocab;
  if (!options.weightsPath.empty())
    TRELLIS_RETURN_IF_ERROR(trainer->loadWeights(options.weightsPath));
  if (!options.loadDir.empty())
    TRELLIS_RETURN_IF_ERROR(trainer->load(options.loadDir));
  return trainer;
}

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
  if (gradNormResult_ >= 0 &&
      plan.holds(plan.results[gradNormResult_].stages)) {
    float norm = 0;
    TRELLIS_RETURN_IF_ERROR(
        executor_->readResultValues(gradNormResult_, &norm));
    lastGradNorm_ = norm;
  }
  if (expertLoadResult_ >= 0 &&
      plan.holds(plan.results[expertLoadResult_].stages)) {
    const std::vector<int64_t> &shape =
        plan.buffers[plan.results[expertLoadResult_].buffer].shape;
    lastExpertLoad_.resize(shape[0] * shape[1]);
    expertLoadLayers_ = shape[0];
    TRELLIS_RETURN_IF_ERROR(
        executor_->readResultValues(expertLoadResult_, lastExpertLoad_.data()));
  }
  TRELLIS_RETURN_IF_ERROR(collectLoss().withContext(stepName));
  ++completedSteps_;
  dataPosition_ += batch_;
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

std::optional<double> Trainer::lastExpertImbalance() const {
  if (lastExpertLoad_.empty() || expertLoadLayers_ == 0)
    return std::nullopt;
  size_t experts = lastExpertLoad_.size() / expertLoadLayers_;
  double worst = 0;
  for (int64_t layer = 0; layer < expertLoadLayers_; ++layer) {
    const float *row = lastExpertLoad_.data() + layer * experts;
    double sum = 0, most = 0;
    for (size_t e = 0; e < experts; ++e) {
      sum += row[e];
      most = std::max<double>(most, row[e]);
    }
    if (sum > 0)
      worst = std::max(worst, most / (sum / experts));
  }
  return worst;
}

} // namespace trellis::runtime
