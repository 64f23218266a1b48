//===- TrainerSetup.cpp - Building a trainer ------------------------------===//
//
// Trainer::create's steps: this rank's device, the checks of the plan
// against the launch and the batch, the data, the rendezvous with the
// other ranks, this rank's stage, the executor, the initial or restored
// state.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/Trainer.h"

#include "trellis/Runtime/Initializer.h"
#include "trellis/Runtime/Launcher.h"
#include "trellis/Runtime/OpShapes.h"
#include "trellis/Runtime/TokenSource.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include <nlohmann/json.hpp>

namespace trellis::runtime {

using json = nlohmann::json;

namespace {

/// The input arguments of `stream` (`tokens`: one batch) or `tokens.0`, ...
/// (one per micro-batch), in micro-batch order; empty when they are missing,
/// mixed, or not numbered 0..m-1.
std::vector<int64_t> microBatchInputs(const Plan &plan,
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

} // namespace

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
    if (const Result &result = p.results[i]; result.report) {
      StepMetric metric;
      metric.result = static_cast<int64_t>(i);
      metric.name = result.metric;
      metric.report = *result.report;
      metric.shape = p.buffers[result.buffer].shape;
      metrics_.push_back(std::move(metric));
    }
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

/// Where this rank's device sits on its node: a lone process is the node's
/// only rank; a launched one is told its place, or counts it from its rank.
DeviceOptions rankDeviceOptions(const TrainOptions &options) {
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
  return deviceOptions;
}

/// A lone process runs a plan of one rank; an outside launcher started as
/// many ranks as the plan's mesh has.
Status checkMeshFitsLaunch(const Mesh &mesh, const TrainOptions &options) {
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
  return Status::success();
}

/// The plan takes each micro-batch's tokens and targets, all of one shape
/// [batch, seq] and one layout.
Status checkBatchInputs(const Plan &plan) {
  std::vector<int64_t> tokens = microBatchInputs(plan, "tokens");
  std::vector<int64_t> targets = microBatchInputs(plan, "targets");
  if (tokens.empty() || tokens.size() != targets.size())
    return Status::error(
        "expected tokens and targets inputs (named tokens and targets, or "
        "tokens.0 ... and targets.0 ... per micro-batch), found " +
        std::to_string(tokens.size()) + " tokens and " +
        std::to_string(targets.size()) + " targets inputs");
  const BufferDesc &tokenDesc =
      plan.buffers[plan.arguments[tokens.front()].buffer];
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokenDesc.shape.size() != 2 ||
        plan.buffers[plan.arguments[tokens[i]].buffer].shape !=
            tokenDesc.shape ||
        plan.buffers[plan.arguments[targets[i]].buffer].shape !=
            tokenDesc.shape ||
        plan.arguments[tokens[i]].sharding !=
            plan.arguments[tokens.front()].sharding)
      return Status::error("expected tokens and targets of one shape "
                           "[batch, seq] and one layout in every micro-batch");
  return Status::success();
}

/// The vocabulary: from the metadata, else the class dimension of the
/// loss (plans compiled from hand-written MLIR carry no model metadata).
StatusOr<int64_t> vocabularySize(const Plan &plan) {
  int64_t vocab = plan.metadataInteger("vocab_size", 0);
  for (const StageProgram &stage : plan.stages)
    for (const ActionProgram &program : stage.programs)
      for (const Instruction &instruction : program.instructions)
        if (vocab < 1 && isLoss(instruction))
          vocab = plan.buffers[instruction.inputs[0]].shape.back();
  if (vocab < 1)
    return Status::error("cannot tell the vocabulary size: the plan has no "
                         "vocab_size metadata and no cross_entropy");
  return vocab;
}

/// The training batches' source: synthetic, or token files; none where the
/// caller passes each step's batch.
StatusOr<std::unique_ptr<TokenSource>>
openTrainingData(const TrainOptions &options, int64_t vocab) {
  if (options.callerBatches)
    return std::unique_ptr<TokenSource>();
  if (options.data == "synthetic" || options.data == "repeat")
    return makeSyntheticTokens(options.seed, vocab, options.data == "repeat");
  return openTokenData(options.data, options.dataDtype, options.dataOrder,
                       options.seed, vocab);
}

/// Held-out windows, one after another from the start: the same batches
/// at every evaluation; none without --eval-data.
StatusOr<std::unique_ptr<TokenSource>> openEvalData(const TrainOptions &options,
                                                    int64_t vocab) {
  if (options.evalData.empty())
    return std::unique_ptr<TokenSource>();
  StatusOr<std::unique_ptr<TokenSource>> file = openTokenData(
      options.evalData, options.dataDtype, "sequential", options.seed, vocab);
  if (!file.ok())
    return file.status().withContext("--eval-data");
  return file;
}

/// The axis lists of every stage's collectives: every rank connects the
/// groups of every stage, so that each group's members all take part in
/// building it.
std::vector<AxisList> collectiveGroups(const Plan &plan) {
  std::vector<AxisList> groups;
  for (const StageProgram &stage : plan.stages)
    for (const ActionProgram &program : stage.programs)
      for (const AxisList &axes : program.instructionAxes)
        if (!axes.empty() &&
            std::find(groups.begin(), groups.end(), axes) == groups.end())
          groups.push_back(axes);
  return groups;
}

/// How this rank meets the others: the store, the job's secret, and what
/// every rank must agree on.
RendezvousOptions rendezvousOptions(const TrainOptions &options,
                                    const Plan &plan, const TokenSource *data,
                                    const TokenSource *evalData) {
  RendezvousOptions rendezvous;
  rendezvous.storeDir = options.rendezvousDir;
  rendezvous.storeHost = options.masterAddr;
  rendezvous.storePort = options.masterPort;
  rendezvous.hostname = options.hostname;
  rendezvous.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options.timeoutSeconds * 1000));
  if (const char *token = std::getenv(kJobTokenVariable))
    rendezvous.jobToken = token;
  rendezvous.agreement = jobFields(options, plan, data, evalData);
  return rendezvous;
}

/// A launched rank's communicator, connected with every rank of the mesh
/// (which must agree on the job); none for a lone process.
StatusOr<std::unique_ptr<Communicator>>
connectRank(const Backend &backend, Device &device, const Plan &plan,
            const TrainOptions &options, const TokenSource *data,
            const TokenSource *evalData) {
  if (options.rank < 0)
    return std::unique_ptr<Communicator>();
  return backend.connect(device, planMesh(plan), options.rank,
                         collectiveGroups(plan), transferLinks(plan),
                         rendezvousOptions(options, plan, data, evalData));
}

/// Selects this rank's stage: the others' programs need no memory here.
/// Their live micro-batch counts stay (the memory report reads every
/// stage's).
void keepOwnStage(Plan &plan, int64_t rank) {
  selectStage(plan, stageOfRank(plan, rank));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (static_cast<int64_t>(s) == plan.stage)
      continue;
    int64_t live = plan.stages[s].liveMicroBatches;
    plan.stages[s] = StageProgram();
    plan.stages[s].liveMicroBatches = live;
  }
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
                                                   Plan plan) {
  StatusOr<const Backend *> backend = findBackend(options.device);
  if (!backend.ok())
    return backend.status();
  StatusOr<std::unique_ptr<Device>> device =
      (*backend)->createDevice(rankDeviceOptions(options));
  if (!device.ok())
    return device.status();
  TRELLIS_RETURN_IF_ERROR(checkMeshFitsLaunch(planMesh(plan), options));
  TRELLIS_RETURN_IF_ERROR(checkBatchInputs(plan));
  StatusOr<int64_t> vocab = vocabularySize(plan);
  if (!vocab.ok())
    return vocab.status();
  StatusOr<std::unique_ptr<TokenSource>> data =
      openTrainingData(options, *vocab);
  if (!data.ok())
    return data.status();
  StatusOr<std::unique_ptr<TokenSource>> evalData =
      openEvalData(options, *vocab);
  if (!evalData.ok())
    return evalData.status();
  StatusOr<std::unique_ptr<Communicator>> communicator = connectRank(
      **backend, **device, plan, options, data->get(), evalData->get());
  if (!communicator.ok())
    return communicator.status();
  int64_t rank = std::max<int64_t>(options.rank, 0);
  keepOwnStage(plan, rank);
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(std::move(plan), **device, communicator->get(),
                       /*updatesInPlace=*/options.onNonfinite != "skip");
  if (!executor.ok())
    return executor.status();
  TRELLIS_RETURN_IF_ERROR(initializeArguments(**executor, options.seed, rank));
  std::unique_ptr<Trainer> trainer(
      new Trainer(std::move(*device), std::move(*communicator),
                  std::move(*executor), std::move(*data)));
  trainer->onNonfinite_ = options.onNonfinite;
  trainer->evalData_ = std::move(*evalData);
  trainer->vocab_ = *vocab;
  // A token file too short for one window is found now, before step 1.
  if (trainer->data_)
    TRELLIS_RETURN_IF_ERROR(trainer->data_->checkWindows(trainer->seq_));
  if (trainer->evalData_)
    TRELLIS_RETURN_IF_ERROR(trainer->evalData_->checkWindows(trainer->seq_)
                                .withContext("--eval-data"));
  if (!options.weightsPath.empty())
    TRELLIS_RETURN_IF_ERROR(trainer->loadWeights(options.weightsPath));
  if (!options.loadDir.empty())
    TRELLIS_RETURN_IF_ERROR(trainer->load(options.loadDir));
  return trainer;
}

std::vector<std::string> Trainer::dataNotes(int64_t evalBatches) const {
  std::vector<std::string> notes;
  std::string window =
      " windows of seq + 1 = " + std::to_string(seq_ + 1) + " tokens";
  if (data_) {
    int64_t windows = data_->distinctWindows(seq_);
    if (windows >= 0 && windows < batch_)
      notes.push_back("the token data holds " + std::to_string(windows) +
                      " distinct" + window + ", fewer than a batch's " +
                      std::to_string(batch_) + " rows: rows repeat");
  }
  if (evalData_) {
    int64_t windows = evalData_->distinctWindows(seq_);
    if (windows >= 0 && windows < evalBatches * batch_)
      notes.push_back("--eval-data holds " + std::to_string(windows) + window +
                      "; --eval-batches " + std::to_string(evalBatches) +
                      " of " + std::to_string(batch_) + " rows read " +
                      std::to_string(evalBatches * batch_) +
                      ": the evaluation repeats windows");
  }
  return notes;
}

} // namespace trellis::runtime
