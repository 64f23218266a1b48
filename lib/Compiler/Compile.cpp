//===- Compile.cpp - A model to a training plan ---------------------------===//

#include "trellis/Compiler/Compile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "trellis/Analysis/PipelineCost.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Common/LearningRate.h"
#include "trellis/Compiler/CompileOptionTable.h"
#include "trellis/Compiler/CompileReport.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Graph/Transforms/Passes.h"
#include "trellis/Pipeline/Passes.h"
#include "trellis/Pipeline/PipelineSplit.h"
#include "trellis/Sharding/Passes.h"
#include "trellis/Sharding/ShardingCost.h"
#include "trellis/Target/Plan/PlanEmitter.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>
#include <map>

namespace trellis {

namespace {

/// The plan's mesh, with its degrees by role.
struct ParallelDegrees {
  /// Ranks the batch splits over (data and expert axes together).
  int64_t dataParallel = 1;
  int64_t tensorParallel = 1;
  int64_t pipeline = 1;
  int64_t contextParallel = 1;
  /// Every axis, the pipeline's included, major to minor.
  std::vector<MeshAxis> axes;
  /// The names of the pipeline and tensor axes ("pp", "tp" when absent).
  std::string pipelineAxis = "pp", tensorAxis = "tp";
  /// The names of the batch's axes.
  std::vector<std::string> dataAxes;

  /// The axes ZeRO shards over: --zero-axes, else the batch's.
  std::vector<std::string> zeroAxes(const CompileOptions &options) const {
    if (!options.zeroAxes)
      return dataAxes;
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(*options.zeroAxes)
        .split(names, ',', -1, /*KeepEmpty=*/false);
    std::vector<std::string> axes;
    for (llvm::StringRef name : names)
      axes.push_back(name.trim().str());
    return axes;
  }

  /// The ranks of the ZeRO axes together.
  int64_t zeroRanks(const CompileOptions &options) const {
    int64_t ranks = 1;
    for (const std::string &name : zeroAxes(options))
      for (const MeshAxis &axis : axes)
        if (axis.name == name)
          ranks *= axis.size;
    return ranks;
  }

  /// The step's mesh as text: every axis but the pipeline's.
  std::string stepMesh() const {
    std::vector<MeshAxis> step;
    for (const MeshAxis &axis : axes)
      if (axis.role != AxisRole::Pipeline)
        step.push_back(axis);
    std::optional<Mesh> mesh = Mesh::create(std::move(step), nullptr);
    return mesh ? mesh->toString() : std::string();
  }
};

/// The mesh of `--mesh`, or of the degree options when it is absent (pp,
/// dp, cp, tp major to minor, cp only when given), with its degrees by role;
/// nullopt after reporting an axis without a role or two axes of a role
/// that takes one.
std::optional<ParallelDegrees>
resolveParallelDegrees(const CompileOptions &options, MessageSink sink) {
  std::vector<MeshAxis> axes;
  if (!options.mesh) {
    for (auto [flag, value] : {std::pair<const char *, std::optional<int64_t>>{
                                   "--pp", options.pipeline},
                               {"--dp", options.dataParallel},
                               {"--ep", options.expertParallel},
                               {"--cp", options.contextParallel},
                               {"--tp", options.tensorParallel}})
      if (value.value_or(1) < 1) {
        sink(MessageKind::Error,
             llvm::Twine(flag) +
                 (flag == llvm::StringRef("--pp")
                      ? ": expected a positive number of stages, found "
                      : ": expected a positive degree, found ") +
                 llvm::Twine(*value));
        return std::nullopt;
      }
    axes = {{"pp", options.pipeline.value_or(1)},
            {"dp", options.dataParallel.value_or(1)}};
    if (options.expertParallel.value_or(1) != 1)
      axes.push_back({"ep", *options.expertParallel});
    if (options.contextParallel.value_or(1) != 1)
      axes.push_back({"cp", *options.contextParallel});
    axes.push_back({"tp", options.tensorParallel.value_or(1)});
    for (MeshAxis &axis : axes)
      axis.role = impliedAxisRole(axis.name);
  } else {
    if (options.dataParallel || options.tensorParallel || options.pipeline ||
        options.contextParallel || options.expertParallel) {
      sink(MessageKind::Error, "--mesh and --dp/--tp/--pp/--cp/--ep both "
                               "given: expected one description of the "
                               "mesh");
      return std::nullopt;
    }
    std::optional<Mesh> mesh = parseMeshText(*options.mesh, "--mesh", sink);
    if (!mesh)
      return std::nullopt;
    axes = mesh->axes();
  }
  ParallelDegrees degrees;
  degrees.axes = axes;
  // The one axis of each of these roles, by name.
  std::map<AxisRole, std::string> single;
  for (const MeshAxis &axis : axes) {
    switch (axis.role) {
    case AxisRole::Unassigned:
      sink(MessageKind::Error,
           "--mesh: axis '" + axis.name +
               "' has no role: expected " + axis.name +
               ":ROLE=N with ROLE data, tensor, pipeline, context or "
               "expert (dp, dp_replicate, dp_shard, tp, pp, cp and ep "
               "imply theirs)");
      return std::nullopt;
    case AxisRole::Data:
    case AxisRole::Expert:
      degrees.dataParallel *= axis.size;
      degrees.dataAxes.push_back(axis.name);
      continue;
    case AxisRole::Tensor:
      degrees.tensorParallel = axis.size;
      degrees.tensorAxis = axis.name;
      break;
    case AxisRole::Pipeline:
      degrees.pipeline = axis.size;
      degrees.pipelineAxis = axis.name;
      break;
    case AxisRole::Context:
      degrees.contextParallel = axis.size;
      break;
    }
    auto [known, inserted] = single.try_emplace(axis.role, axis.name);
    if (!inserted) {
      sink(MessageKind::Error,
           "--mesh: expected at most one " +
               std::string(axisRoleName(axis.role)) + " axis, found '" +
               known->second + "' and '" + axis.name + "'");
      return std::nullopt;
    }
  }
  return degrees;
}

/// The elements of the model's parameters: the arguments of role param of
/// @forward (or of the step given instead), before any split.
int64_t countModelParameters(mlir::ModuleOp module) {
  auto function = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!function)
    function = module.lookupSymbol<mlir::func::FuncOp>("train_step");
  if (!function)
    function = module.lookupSymbol<mlir::func::FuncOp>("gradients");
  int64_t count = 0;
  for (unsigned i = 0; function && i < function.getNumArguments(); ++i) {
    auto role = function.getArgAttrOfType<mlir::StringAttr>(
        i, graph::GraphDialect::kRoleAttrName);
    auto type =
        llvm::dyn_cast<mlir::RankedTensorType>(function.getArgumentTypes()[i]);
    if (role && role.getValue() == "param" && type)
      count += type.getNumElements();
  }
  return count;
}

/// What a pipeline asks for: the schedule, the pipeline's shape, and the
/// layers of each virtual stage.
struct PipelineRequest {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  PipelineShape shape;
  StageLayers layers;
};

/// The schedule and the layers of each virtual stage for a pipeline of
/// `stages` ranks over `forward`, or nullopt after reporting an error (the
/// messages name the driver's options; trellis-assign-stages checks the
/// split again).
std::optional<PipelineRequest> planPipeline(mlir::func::FuncOp forward,
                                            int64_t stages,
                                            const CompileOptions &options,
                                            MessageSink sink) {
  std::string scheduleName = options.schedule.value_or("1f1b");
  int64_t chunks = options.chunks.value_or(1);
  std::string stageLayers = options.stageLayers.value_or("");
  std::optional<ScheduleKind> kind = parseScheduleKind(scheduleName);
  if (!kind) {
    sink(MessageKind::Error,
         "--schedule: unknown schedule '" + scheduleName +
             "': expected gpipe, 1f1b, interleaved or zb-h1");
    return std::nullopt;
  }
  PipelineRequest config{*kind, {stages, options.microBatches, chunks}, {}};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(*kind, config.shape, &error);
  if (!streams) {
    sink(MessageKind::Error, "--schedule: " + error);
    return std::nullopt;
  }
  mlir::FailureOr<ModelPipelineCost> cost =
      computePipelineCost(forward, RooflineRates());
  if (mlir::failed(cost))
    return std::nullopt;
  std::optional<StageLayers> split =
      chooseStageLayers(cost->parts, stageLayers, *streams, config.shape,
                        ModelPipelineCost::forwardShare, &error);
  if (!split) {
    if (!stageLayers.empty()) {
      sink(MessageKind::Error, error);
      return std::nullopt;
    }
    sink(MessageKind::Error,
         "--pp " + std::to_string(stages) +
             (chunks > 1 ? " --chunks " + std::to_string(chunks) + " (" +
                               std::to_string(config.shape.virtualStages()) +
                               " virtual stages)"
                         : std::string()) +
             ": " + error);
    return std::nullopt;
  }
  config.layers = *split;
  return config;
}

/// The training options of the autodiff phase, or nullopt after reporting
/// the first option that cannot work.
std::optional<TrainingOptions> trainingOptions(const CompileOptions &options,
                                               const ParallelDegrees &degrees,
                                               bool pipelined,
                                               MessageSink sink) {
  auto fail = [&](const llvm::Twine &message) {
    sink(MessageKind::Error, message);
    return std::nullopt;
  };
  TrainingOptions training;
  if (options.optimizer == "none")
    training.optimizer = std::nullopt;
  else if (options.optimizer == "sgd")
    training.optimizer = OptimizerKind::Sgd;
  training.learningRate = options.learningRate;
  training.beta1 = options.beta1;
  training.beta2 = options.beta2;
  training.epsilon = options.epsilon;
  training.weightDecay = options.weightDecay;
  training.decayOneDimensional = options.decayOneDimensional;
  if (options.lrSchedule) {
    // A name the option table's choices hold (checkCompileOptions).
    std::optional<LrScheduleKind> kind =
        parseLrScheduleKind(*options.lrSchedule);
    assert(kind && "--lr-schedule is checked by its row");
    if (!training.optimizer || *training.optimizer != OptimizerKind::AdamW)
      return fail("--lr-schedule: a schedule reads AdamW's step count: "
                  "expected --optimizer adamw, found " +
                  options.optimizer);
    LrSchedule schedule{*kind,
                        options.learningRate,
                        options.minLearningRate,
                        options.warmupSteps,
                        options.decaySteps,
                        options.wsdDecaySteps};
    if (std::string wrong = checkLrSchedule(schedule); !wrong.empty())
      return fail(wrong);
    training.lrSchedule = *options.lrSchedule;
    training.warmupSteps = options.warmupSteps;
    training.decaySteps = options.decaySteps;
    training.wsdDecaySteps = options.wsdDecaySteps;
    training.minLearningRate = options.minLearningRate;
  } else if (options.warmupSteps || options.decaySteps ||
             options.wsdDecaySteps || options.minLearningRate) {
    return fail("--warmup-steps, --decay-steps, --wsd-decay-steps and "
                "--min-lr shape a schedule: expected --lr-schedule");
  }
  if (options.clipGradNorm) {
    if (!std::isfinite(*options.clipGradNorm) || *options.clipGradNorm <= 0)
      return fail(
          "--clip-grad: expected a finite number > 0, found " +
          llvm::formatv("{0}", llvm::format("%g", *options.clipGradNorm))
              .str());
    if (!training.optimizer)
      return fail("--clip-grad: clips what the optimizer updates with: "
                  "expected --optimizer adamw or sgd, found none");
    training.clipGradNorm = options.clipGradNorm;
  }
  if (options.expertBiasUpdate) {
    if (!std::isfinite(*options.expertBiasUpdate) ||
        *options.expertBiasUpdate <= 0)
      return fail(
          "--expert-bias-update: expected a finite number > 0, found " +
          llvm::formatv("{0}", llvm::format("%g", *options.expertBiasUpdate))
              .str());
    if (!training.optimizer)
      return fail("--expert-bias-update: moves the biases each training "
                  "step: expected --optimizer adamw or sgd, found none");
    training.expertBiasUpdate = options.expertBiasUpdate;
  }
  if (options.precision == "bf16")
    training.precision = LowPrecision::BF16;
  else if (options.precision == "fp16")
    training.precision = LowPrecision::F16;
  if (options.precision == "fp16" && !training.optimizer)
    return fail("--precision fp16 scales the loss dynamically, and the "
                "optimizer unscales and skips overflowing steps: expected "
                "--optimizer adamw or sgd, found none");
  if (options.gradReduceDtype == "bf16" && options.precision != "bf16")
    return fail("--grad-reduce-dtype bf16 reduces the gradients of a bf16 "
                "step: expected --precision bf16, found " +
                options.precision);
  if (options.gradReduceDtype == "bf16" &&
      (options.microBatches != 1 || degrees.pipeline != 1))
    return fail("--grad-reduce-dtype bf16 reduces each micro-batch's "
                "gradients before they are accumulated in fp32 "
                "(micro-batches times the traffic of fp32 reductions): "
                "expected one micro-batch and no pipeline, found "
                "--microbatches " +
                std::to_string(options.microBatches));
  training.reduceGradientsInCompute = options.gradReduceDtype == "bf16";
  training.microBatches = options.microBatches;
  if (options.recompute == "full")
    training.recompute = RecomputeKind::Full;
  else if (options.recompute == "selective")
    training.recompute = RecomputeKind::Selective;
  training.pipelined = pipelined;
  // ZeRO-2 and 3 reduce-scatter each micro-batch's product into a split
  // total: the product must exist on its own.
  training.fuseGradientAccumulation = options.fuseGradientAccumulation;
  training.fuseIntoTotals = options.zero < 2;
  return training;
}

/// Checks the sharding options against the mesh; reports the first that
/// cannot work.
mlir::LogicalResult checkShardingOptions(const CompileOptions &options,
                                         const ParallelDegrees &degrees,
                                         MessageSink sink) {
  auto fail = [&](const llvm::Twine &message) {
    sink(MessageKind::Error, message);
    return mlir::failure();
  };
  std::string zero = std::to_string(options.zero);
  if (options.zero > 0 && degrees.dataParallel <= 1)
    return fail("--zero " + zero +
                " shards model states over the data-parallel axis: expected "
                "--dp > 1 or a dp axis in --mesh, found dp=" +
                std::to_string(degrees.dataParallel));
  if (options.zeroAxes && options.zero == 0)
    return fail("--zero-axes names the axes ZeRO shards over: expected "
                "--zero 1, 2 or 3");
  if (options.zeroAxes) {
    int64_t ranks = 1;
    for (const std::string &name : degrees.zeroAxes(options)) {
      auto axis = llvm::find_if(degrees.axes, [&](const MeshAxis &axis) {
        return axis.name == name;
      });
      if (axis == degrees.axes.end() || !splitsBatch(axis->role))
        return fail("--zero-axes: expected axes of the batch (data or "
                    "expert) among " +
                    llvm::join(degrees.dataAxes, ", ") + ", found '" + name +
                    "'");
      ranks *= axis->size;
    }
    if (ranks <= 1)
      return fail("--zero-axes " + *options.zeroAxes +
                  ": expected axes of more than one rank together");
  }
  if (options.zero > 0 && options.zero < 3 && options.optimizer != "adamw" &&
      options.precision == "fp32")
    return fail("--zero " + zero +
                " shards optimizer states (AdamW's moments, mixed precision's "
                "fp32 masters), and --optimizer " +
                options.optimizer +
                " in fp32 has none: expected --optimizer adamw, --precision "
                "bf16 or fp16, or --zero 3");
  if (options.sequenceParallel && degrees.tensorParallel <= 1)
    return fail("--sp splits the norm regions along the sequence over the "
                "tensor-parallel axis: expected --tp > 1 or a tp axis in "
                "--mesh, found tp=" +
                std::to_string(degrees.tensorParallel));
  if (degrees.contextParallel < 1)
    return fail("--cp: expected a positive degree, found " +
                std::to_string(degrees.contextParallel));
  return mlir::success();
}

/// The plan's text: `{"checksum":"crc32:H",` and then the rest of the JSON,
/// whose CRC-32 H is (verifyPlanChecksum), so that a changed byte is
/// "corrupt plan", never a different run.
std::string planText(const llvm::json::Value &plan) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << plan;
  stream.flush();
  std::string result;
  llvm::raw_string_ostream out(result);
  out << llvm::format(
             "{\"checksum\":\"crc32:%08x\",",
             llvm::crc32(llvm::ArrayRef<uint8_t>(
                 reinterpret_cast<const uint8_t *>(text.data()), text.size())))
      << llvm::StringRef(text).drop_front() << "\n";
  out.flush();
  return result;
}

} // namespace

std::optional<Mesh> parseMeshText(llvm::StringRef text,
                                  llvm::StringRef optionName,
                                  MessageSink sink) {
  MeshError error;
  std::optional<Mesh> mesh = Mesh::parse(std::string_view(text), &error);
  if (mesh)
    return mesh;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, optionName), llvm::SMLoc());
  const char *start =
      sourceMgr.getMemoryBuffer(1)->getBufferStart() +
      std::min(error.column ? error.column - 1 : 0, text.size());
  std::string message;
  llvm::raw_string_ostream os(message);
  sourceMgr.PrintMessage(os, llvm::SMLoc::getFromPointer(start),
                         llvm::SourceMgr::DK_Error, error.message);
  os.flush();
  sink(MessageKind::LocatedError, message);
  return std::nullopt;
}

mlir::LogicalResult checkCompileOptions(const CompileOptions &options,
                                        MessageSink sink) {
  if (std::string invalid = checkCompileOptionValues(options);
      !invalid.empty()) {
    sink(MessageKind::Error, invalid);
    return mlir::failure();
  }
  if (std::string invalid = checkOptimizerHyperparameters(
          options.learningRate, options.beta1, options.beta2, options.epsilon,
          options.weightDecay,
          {"--lr", "--beta1", "--beta2", "--adam-eps", "--weight-decay"});
      !invalid.empty()) {
    sink(MessageKind::Error, invalid);
    return mlir::failure();
  }
  if (!std::isfinite(options.bucketMiB) || options.bucketMiB <= 0) {
    sink(MessageKind::Error,
         llvm::formatv("--bucket-mib: expected a finite size > 0, found {0}",
                       llvm::format("%g", options.bucketMiB)));
    return mlir::failure();
  }
  std::optional<ParallelDegrees> degrees =
      resolveParallelDegrees(options, sink);
  if (!degrees)
    return mlir::failure();
  bool expertAxis = llvm::any_of(degrees->axes, [](const MeshAxis &axis) {
    return axis.role == AxisRole::Expert && axis.size > 1;
  });
  // Said, not refused: a script may pass one dispatch to every layout it
  // compiles, the one-rank reference included.
  if (options.expertDispatch == "all-to-all" && !expertAxis)
    sink(MessageKind::Warning,
         "--ep-dispatch all-to-all changes nothing here: it sends each token "
         "to the ranks holding its experts, and no expert axis splits them "
         "(--ep N with N > 1, or an ep axis in --mesh)");
  if (options.microBatches < 1 || options.batch % options.microBatches != 0) {
    sink(MessageKind::Error,
         llvm::formatv("--microbatches: expected a positive divisor of the "
                       "batch ({0}), found {1}",
                       options.batch, options.microBatches));
    return mlir::failure();
  }
  return mlir::success();
}

namespace {

/// Facts of the model the plan's metadata carries: the batch and
/// micro-batches compiled for, the compute dtype (checkpoints store the
/// model's weights in it), and the vocabulary the runtime checks token ids
/// against (a model not made from a config, whether MLIR, built or
/// converted, has it in its loss's logits, before any split).
void recordModelFacts(LoadedModel &model, const CompileOptions &options) {
  if (model.metadata.get("batch"))
    model.metadata["batch"] = options.batch;
  model.metadata["micro_batches"] = options.microBatches;
  model.metadata["precision"] = options.precision;
  if (!model.metadata.get("vocab_size"))
    model.module->walk([&](graph::CrossEntropyOp loss) {
      model.metadata["vocab_size"] =
          llvm::cast<mlir::RankedTensorType>(loss.getLogits().getType())
              .getShape()
              .back();
      return mlir::WalkResult::interrupt();
    });
}

/// The pipeline the options ask for (none without --pp > 1), its facts
/// recorded in the metadata; fails on options that contradict the model or
/// each other.
mlir::FailureOr<std::optional<PipelineRequest>>
requestPipeline(LoadedModel &model, llvm::StringRef stepName,
                const CompileOptions &options, const ParallelDegrees &degrees,
                MessageSink sink) {
  auto fail = [&](const llvm::Twine &message) {
    sink(MessageKind::Error, message);
    return mlir::failure();
  };
  mlir::ModuleOp module = model.module.get();
  if (module.lookupSymbol<mlir::func::FuncOp>(stepName) &&
      (options.microBatches != 1 || degrees.pipeline != 1))
    return fail(
        llvm::Twine(options.microBatches != 1 ? "--microbatches" : "--pp") +
        ": expected a @forward to differentiate, found an existing @" +
        stepName);
  if (degrees.pipeline == 1) {
    for (auto [given, flag] :
         {std::pair<bool, const char *>{options.schedule.has_value(),
                                        "--schedule"},
          {options.chunks.has_value(), "--chunks"},
          {options.stageLayers.has_value(), "--pp-layers"}})
      if (given)
        return fail(llvm::Twine(flag) + " orders or splits pipeline stages: "
                                        "expected --pp > 1");
    return std::optional<PipelineRequest>();
  }
  if (degrees.pipeline < 1)
    return fail("--pp: expected a positive number of stages, found " +
                std::to_string(degrees.pipeline));
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward)
    return fail("--pp: expected a function @forward");
  std::optional<PipelineRequest> pipeline =
      planPipeline(forward, degrees.pipeline, options, sink);
  if (!pipeline)
    return mlir::failure();
  llvm::json::Array layers;
  for (int64_t count : pipeline->layers)
    layers.push_back(count);
  model.metadata["pipeline"] = llvm::json::Object{
      {"schedule", options.schedule.value_or("1f1b")},
      {"stages", degrees.pipeline},
      {"chunks", options.chunks.value_or(1)},
      {"stage_layers", std::move(layers)},
  };
  return pipeline;
}

/// One pass manager's passes, from the phases' builders: autodiff (unless
/// the input is a step already), sharding, and the pipeline phase for a
/// step of micro-batches (pipelined or not: it runs as one program per
/// stage of action programs, each written once, and a schedule), then
/// fusion.
mlir::LogicalResult buildCompilePasses(
    mlir::PassManager &pm, mlir::ModuleOp module, llvm::StringRef stepName,
    const CompileOptions &options, const ParallelDegrees &degrees,
    const std::optional<PipelineRequest> &pipeline, MessageSink sink) {
  if (!module.lookupSymbol<mlir::func::FuncOp>(stepName)) {
    std::optional<TrainingOptions> training =
        trainingOptions(options, degrees, pipeline.has_value(), sink);
    if (!training)
      return mlir::failure();
    buildTrainingPipeline(pm, *training);
  }
  if (mlir::failed(checkShardingOptions(options, degrees, sink)))
    return mlir::failure();
  if (degrees.dataParallel != 1 || degrees.tensorParallel != 1 ||
      degrees.contextParallel != 1) {
    ShardingOptions sharding;
    sharding.mesh = degrees.stepMesh();
    sharding.zeroStage = options.zero;
    if (options.zeroAxes)
      sharding.zeroAxes = degrees.zeroAxes(options);
    sharding.sequenceParallel = options.sequenceParallel;
    sharding.contextParallel = degrees.contextParallel > 1;
    sharding.contextKind = options.contextKind;
    sharding.expertDispatch = options.expertDispatch;
    sharding.function = stepName.str();
    sharding.bucketBytes = static_cast<int64_t>(options.bucketMiB * (1 << 20));
    sharding.bucketsPerPart = pipeline.has_value();
    sharding.explain = options.explain;
    sharding.partition = !options.emitEstimate;
    sharding.scheduleCollectives = options.scheduleCollectives;
    buildShardingPipeline(pm, sharding);
  }
  if (pipeline || options.microBatches > 1) {
    PipelinePhaseOptions phase;
    phase.function = stepName.str();
    if (pipeline) {
      phase.stages = pipeline->shape.ranks;
      phase.chunks = pipeline->shape.chunks;
      phase.schedule = pipeline->kind;
      phase.layers = pipeline->layers;
      if (degrees.tensorParallel > 1)
        phase.pieceAxis = degrees.tensorAxis;
      phase.axis = degrees.pipelineAxis;
      for (const MeshAxis &axis : degrees.axes)
        phase.meshOrder.push_back(axis.name);
    }
    // The estimate prices the propagated step with its stages assigned.
    phase.split = !options.emitEstimate;
    buildPipelinePhase(pm, phase);
  }
  if (options.fuse && !options.emitEstimate)
    pm.addPass(graph::createFuseElementwisePass());
  return mlir::success();
}

/// The plan of the compiled step (one program, or one per stage).
mlir::FailureOr<std::string> emitPlanText(LoadedModel &model,
                                          llvm::StringRef stepName, bool staged,
                                          const CompileOptions &options) {
  mlir::ModuleOp module = model.module.get();
  PlanMetadata metadata{std::move(model.metadata)};
  llvm::json::Object optimizer{
      {"kind", options.optimizer},  {"learning_rate", options.learningRate},
      {"beta1", options.beta1},     {"beta2", options.beta2},
      {"epsilon", options.epsilon}, {"weight_decay", options.weightDecay},
  };
  // The schedule, for the rate the runtime reports (the optimizer ops
  // compute it from the step count).
  if (options.lrSchedule) {
    optimizer["lr_schedule"] = *options.lrSchedule;
    optimizer["warmup_steps"] = options.warmupSteps;
    optimizer["decay_steps"] = options.decaySteps;
    optimizer["wsd_decay_steps"] = options.wsdDecaySteps;
    optimizer["min_lr"] = options.minLearningRate;
  }
  metadata.fields["optimizer"] = std::move(optimizer);
  mlir::FailureOr<llvm::json::Value> plan =
      staged ? emitStagedPlan(module, stepName, std::move(metadata))
             : emitPlan(module.lookupSymbol<mlir::func::FuncOp>(stepName),
                        std::move(metadata));
  if (mlir::failed(plan))
    return mlir::failure();
  return planText(*plan);
}

} // namespace

mlir::FailureOr<CompiledModel> compileModel(LoadedModel model,
                                            const CompileOptions &options,
                                            MessageSink sink,
                                            mlir::TimingScope &timing) {
  if (mlir::failed(checkCompileOptions(options, sink)))
    return mlir::failure();
  std::optional<ParallelDegrees> degrees =
      resolveParallelDegrees(options, sink);
  recordModelFacts(model, options);
  mlir::ModuleOp module = model.module.get();
  CompiledModel compiled;
  compiled.modelParameters = countModelParameters(module);
  compiled.meshAxes = degrees->axes;
  llvm::StringRef stepName =
      options.optimizer == "none" ? "gradients" : "train_step";
  mlir::FailureOr<std::optional<PipelineRequest>> pipeline =
      requestPipeline(model, stepName, options, *degrees, sink);
  if (mlir::failed(pipeline))
    return mlir::failure();

  mlir::PassManager pm(module.getContext());
  // The IR is verified once, after the last pass (between passes it costs
  // a walk of the whole step each time); trellis-opt verifies after each.
  pm.enableVerifier(false);
  mlir::TimingScope passTiming = timing.nest("passes");
  pm.enableTiming(passTiming);
  if (mlir::failed(buildCompilePasses(pm, module, stepName, options, *degrees,
                                      *pipeline, sink)) ||
      mlir::failed(pm.run(module)))
    return mlir::failure();
  passTiming.stop();
  mlir::TimingScope verifyTiming = timing.nest("verify");
  if (mlir::failed(mlir::verify(module)))
    return mlir::failure();
  verifyTiming.stop();

  if (options.emitEstimate) {
    CostQueryOptions query;
    query.pipelineAxis = degrees->pipelineAxis;
    if (degrees->tensorParallel > 1)
      query.pieceAxis = degrees->tensorAxis;
    query.ringAttention =
        degrees->contextParallel > 1 && options.contextKind == "ring";
    query.splitWeightGradients = options.schedule == "zb-h1";
    query.scheduleCollectives = options.scheduleCollectives;
    mlir::FailureOr<std::vector<ShardedStepCost>> cost = estimateShardedStep(
        module.lookupSymbol<mlir::func::FuncOp>(stepName), query);
    if (mlir::failed(cost))
      return mlir::failure();
    compiled.text =
        llvm::formatv("{0:2}\n", estimateJson(compiled.modelParameters,
                                              compiled.meshAxes, *cost))
            .str();
    compiled.estimate = std::move(*cost);
    return compiled;
  }

  bool staged = pipeline->has_value() || options.microBatches > 1;
  llvm::SmallVector<mlir::func::FuncOp> stages;
  if (staged) {
    mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>> found =
        findStageFunctions(module, stepName);
    if (mlir::failed(found))
      return mlir::failure();
    stages = std::move(*found);
  }
  // The reports walk every rank's schedule: only when asked for, or for
  // the price of ZeRO-2/3 with a pipeline.
  bool warnsOfZero = pipeline->has_value() && options.zero >= 2 &&
                     degrees->zeroRanks(options) > 1;
  if (options.report || warnsOfZero) {
    std::vector<RankReport> reports =
        staged ? reportStages(stages, options.microBatches, options.report)
               : reportStep(module.lookupSymbol<mlir::func::FuncOp>(stepName));
    if (warnsOfZero)
      if (std::string warning =
              pipelinedZeroWarning(options.zero, options.microBatches,
                                   degrees->zeroRanks(options),
                                   degrees->zeroAxes(options), reports);
          !warning.empty())
        sink(MessageKind::Warning, warning);
    if (options.report)
      compiled.reports = std::move(reports);
  }
  if (options.reportOnly)
    return compiled;
  if (options.emitMlir) {
    llvm::raw_string_ostream os(compiled.text);
    module.print(os);
    os.flush();
    return compiled;
  }
  mlir::TimingScope emitTiming = timing.nest("emit plan");
  mlir::FailureOr<std::string> text =
      emitPlanText(model, stepName, staged, options);
  if (mlir::failed(text))
    return mlir::failure();
  compiled.text = std::move(*text);
  return compiled;
}

} // namespace trellis
