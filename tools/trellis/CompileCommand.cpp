//===- CompileCommand.cpp - `trellis compile` -----------------------------===//
//
// Model (config.json or MLIR) -> training step (autodiff + optimizer) ->
// plan file for the runtime.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "CompileReport.h"
#include "ModelLoading.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "trellis/Analysis/PipelineCost.h"
#include "trellis/Analysis/StepReport.h"
#include "trellis/Autodiff/Passes.h"
#include "trellis/Dialect/Graph/Transforms/Passes.h"
#include "trellis/Pipeline/Passes.h"
#include "trellis/Pipeline/PipelineSplit.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "trellis/Sharding/Passes.h"
#include "trellis/Target/Plan/PlanEmitter.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cmath>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand
    compileCommand("compile",
                   "Compile a model into a training plan for the runtime");

namespace {
cl::OptionCategory modelCategory("Model and batch");
cl::OptionCategory parallelCategory("Parallelism (mesh, pipeline, ZeRO)");
cl::OptionCategory optimizerCategory("Optimizer");
cl::OptionCategory precisionCategory("Precision, memory and fusion");
cl::OptionCategory outputCategory("Output and reports");

cl::opt<std::string> compileInput(cl::Positional,
                                  cl::desc("<config.json | model.mlir>"),
                                  cl::Required, cl::sub(compileCommand));
cl::opt<std::string> compileOutput("o", cl::desc("Output file"),
                                   cl::value_desc("file"), cl::init("-"),
                                   cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileBatch("batch", cl::desc("Batch size"), cl::init(8),
                              cl::cat(modelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileSeq("seq", cl::desc("Sequence length"), cl::init(64),
                            cl::cat(modelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileMicroBatches(
    "microbatches",
    cl::desc("Split each batch into N micro-batches run one after the other, "
             "accumulating gradients (one optimizer step per batch)"),
    cl::init(1), cl::cat(modelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileRecompute(
    "recompute",
    cl::desc("none; selective: the attention core (always: the fused "
             "attention backward recomputes its probabilities, so this is "
             "none); full: each layer's forward again before its backward "
             "instead of keeping its activations"),
    cl::init("none"), cl::cat(precisionCategory), cl::sub(compileCommand));
cl::opt<std::string> compileOptimizer(
    "optimizer", cl::desc("adamw, sgd, or none (the plan returns gradients)"),
    cl::init("adamw"), cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<double> compileLearningRate("lr", cl::desc("Learning rate"),
                                    cl::init(1e-3), cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<double> compileBeta1("beta1", cl::desc("AdamW beta1"), cl::init(0.9),
                             cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<double> compileBeta2("beta2", cl::desc("AdamW beta2"), cl::init(0.999),
                             cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<double> compileEpsilon("adam-eps", cl::desc("AdamW epsilon"),
                               cl::init(1e-8), cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<double> compileWeightDecay("weight-decay", cl::desc("Weight decay"),
                                   cl::init(0.0), cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<std::string> compilePrecision(
    "precision",
    cl::desc("fp32 (default), bf16 or fp16: the forward and backward compute "
             "in bf16 or fp16 from fp32 master weights (the loss, "
             "cross-entropy and the optimizer in fp32); fp16 scales the loss "
             "dynamically"),
    cl::init("fp32"), cl::cat(precisionCategory), cl::sub(compileCommand));
cl::opt<std::string> compileGradReduceDtype(
    "grad-reduce-dtype",
    cl::desc("fp32 (default): data-parallel gradients are reduced in fp32; "
             "bf16 (with --precision bf16): in bf16, half the bytes"),
    cl::init("fp32"), cl::cat(precisionCategory), cl::sub(compileCommand));
cl::opt<bool> compileDecayOneDimensional(
    "decay-1d",
    cl::desc("Apply --weight-decay to 1-D parameters (biases, norm gains) "
             "too; by default they are not decayed"),
    cl::cat(optimizerCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileDataParallel(
    "dp", cl::desc("Data-parallel degree: split the batch over N ranks"),
    cl::init(1), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileTensorParallel(
    "tp",
    cl::desc("Tensor-parallel degree: split attention and MLP weights "
             "(Megatron layout) over N ranks"),
    cl::init(1), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compilePipeline(
    "pp",
    cl::desc("Pipeline stages: split the layers over N ranks (the pp axis, "
             "major to dp and tp); --microbatches gives the micro-batches"),
    cl::init(1), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileSchedule(
    "schedule",
    cl::desc("Pipeline schedule: gpipe, 1f1b, interleaved or zb-h1"),
    cl::init("1f1b"), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileChunks(
    "chunks", cl::desc("Model chunks per pipeline rank (interleaved schedule)"),
    cl::init(1), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileStageLayers(
    "pp-layers",
    cl::desc("Layers per virtual pipeline stage instead of the balanced "
             "split"),
    cl::value_desc("6,7,7,6"), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileZero(
    "zero",
    cl::desc("ZeRO stage over dp: 0 (none), 1 (optimizer states and fp32 "
             "masters split), 2 (and gradients reduce-scattered per "
             "micro-batch into split accumulators), 3 (and parameters "
             "split, gathered before each use)"),
    cl::init(0), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<int64_t> compileContextParallel(
    "cp",
    cl::desc("Context-parallel degree: split the sequence over N ranks (a cp "
             "axis between dp and tp; --cp-kind says how attention sees the "
             "whole sequence)"),
    cl::init(1), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileContextKind(
    "cp-kind",
    cl::desc("ulysses: all_to_all from sequence pieces to head pieces around "
             "rotary embeddings and attention; allgather: keys and values "
             "gathered, each rank attends from its queries' place; ring: "
             "key and value blocks passed around the ring, the sequence in "
             "zigzag order (causal balance)"),
    cl::init("ulysses"), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<bool> compileFuse(
    "fuse",
    cl::desc("Fuse chains of elementwise ops into one pass each "
             "(-trellis-fuse-elementwise; --fuse=false keeps them apart)"),
    cl::init(true), cl::cat(precisionCategory), cl::sub(compileCommand));
cl::opt<bool> compileSequenceParallel(
    "sp",
    cl::desc("Megatron sequence parallelism (with --tp): the norm regions "
             "split along the sequence over tp, each layer's all-reduces "
             "become a reduce-scatter and an all-gather"),
    cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileMesh(
    "mesh",
    cl::desc("Mesh axes, major to minor, instead of --dp/--tp/--pp: e.g. "
             "pp=2,dp=2,tp=2 (tp after dp, so a tensor-parallel group is "
             "adjacent ranks)"),
    cl::value_desc("dp=2,tp=2"), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<double> compileBucketMiB(
    "bucket-mib",
    cl::desc("Size of the fused data-parallel gradient reductions (MiB)"),
    cl::init(25), cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<bool> compileExplain(
    "explain",
    cl::desc("Report, op by op, which factors propagation split, which "
             "operands get resharded, and which large values stay "
             "replicated"),
    cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<bool> compileReport(
    "report",
    cl::desc("Print per rank: parameters, activation estimate, and "
             "communication per step by collective kind and mesh axis"),
    cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<std::string> compileReportJson(
    "report-json",
    cl::desc("Write the report as JSON (docs/Report.md): per rank, the "
             "model states, the memory plan's peak, and the bytes sent per "
             "step by collective kind"),
    cl::value_desc("file"), cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<bool> compileTiming(
    "timing",
    cl::desc("Print the wall time of loading the model, of each pass, and "
             "of emitting and writing the plan"),
    cl::cat(outputCategory), cl::sub(compileCommand));
enum class EmitKind { Plan, Mlir };
cl::opt<EmitKind> compileEmit(
    "emit", cl::desc("What to write"),
    cl::values(clEnumValN(EmitKind::Plan, "plan", "the plan file (default)"),
               clEnumValN(EmitKind::Mlir, "mlir", "the training step as MLIR")),
    cl::init(EmitKind::Plan), cl::cat(outputCategory), cl::sub(compileCommand));

struct ParallelDegrees {
  int64_t dataParallel = 1;
  int64_t tensorParallel = 1;
  int64_t pipeline = 1;
  int64_t contextParallel = 1;
  /// The plan's mesh, major to minor (with the pp axis).
  std::vector<std::pair<std::string, int64_t>> axes;
};

/// The degrees from `--mesh`, or from `--dp`/`--tp`/`--pp` when it is
/// absent.
std::optional<ParallelDegrees> resolveParallelDegrees() {
  if (compileMesh.getNumOccurrences() == 0) {
    ParallelDegrees degrees{compileDataParallel, compileTensorParallel,
                            compilePipeline, compileContextParallel, {}};
    degrees.axes = {{"pp", compilePipeline}, {"dp", compileDataParallel}};
    if (compileContextParallel != 1)
      degrees.axes.emplace_back("cp", compileContextParallel);
    degrees.axes.emplace_back("tp", compileTensorParallel);
    return degrees;
  }
  if (compileDataParallel.getNumOccurrences() ||
      compileTensorParallel.getNumOccurrences() ||
      compilePipeline.getNumOccurrences() ||
      compileContextParallel.getNumOccurrences()) {
    reportError("compile", "--mesh and --dp/--tp/--pp/--cp both given: "
                           "expected one description of the mesh");
    return std::nullopt;
  }
  std::optional<Mesh> mesh = parseMeshOption(compileMesh);
  if (!mesh)
    return std::nullopt;
  ParallelDegrees degrees;
  for (const MeshAxis &axis : mesh->axes())
    degrees.axes.emplace_back(axis.name, axis.size);
  for (const char *name : {"pp", "dp", "tp"})
    if (!mesh->axisIndex(name))
      degrees.axes.emplace_back(name, 1);
  std::optional<size_t> dataAxis = mesh->axisIndex("dp");
  std::optional<size_t> tensorAxis = mesh->axisIndex("tp");
  for (const MeshAxis &axis : mesh->axes()) {
    if (axis.name == "dp") {
      degrees.dataParallel = axis.size;
    } else if (axis.name == "tp") {
      degrees.tensorParallel = axis.size;
    } else if (axis.name == "pp") {
      degrees.pipeline = axis.size;
    } else if (axis.name == "cp") {
      degrees.contextParallel = axis.size;
    } else {
      reportError("compile", "--mesh: unknown axis '" + axis.name +
                                 "': expected dp (data), cp (context), tp "
                                 "(tensor) or pp (pipeline)");
      return std::nullopt;
    }
  }
  // The plan's mesh orders dp, cp, tp major to minor.
  std::optional<size_t> contextAxis = mesh->axisIndex("cp");
  if (contextAxis && degrees.contextParallel > 1 &&
      ((dataAxis && degrees.dataParallel > 1 && *contextAxis < *dataAxis) ||
       (tensorAxis && degrees.tensorParallel > 1 &&
        *tensorAxis < *contextAxis))) {
    reportError("compile", "--mesh: expected 'cp' after 'dp' and before 'tp', "
                           "found '" +
                               compileMesh + "'");
    return std::nullopt;
  }
  if (dataAxis && tensorAxis && *tensorAxis < *dataAxis &&
      degrees.dataParallel > 1 && degrees.tensorParallel > 1) {
    reportError("compile", "--mesh: expected 'tp' after 'dp' (tensor-parallel "
                           "groups are adjacent ranks), found '" +
                               compileMesh + "'");
    return std::nullopt;
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

/// What `--pp` asks for: the schedule, the pipeline's shape, and the
/// layers of each virtual stage.
struct PipelineRequest {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  PipelineShape shape;
  StageLayers layers;
};

/// The schedule and the layers of each virtual stage for a pipeline of
/// `stages` ranks over `forward`, or nullopt after reporting an error (the
/// driver's own messages, naming its options; trellis-assign-stages checks
/// the split again).
std::optional<PipelineRequest> planPipeline(mlir::func::FuncOp forward,
                                            int64_t stages) {
  std::optional<ScheduleKind> kind = parseScheduleKind(compileSchedule);
  if (!kind) {
    reportError("compile", "--schedule: unknown schedule '" + compileSchedule +
                               "': expected gpipe, 1f1b, interleaved or zb-h1");
    return std::nullopt;
  }
  PipelineRequest config{
      *kind, {stages, compileMicroBatches, compileChunks}, {}};
  std::string error;
  std::optional<PipelineStreams> streams =
      buildSchedule(*kind, config.shape, &error);
  if (!streams) {
    reportError("compile", "--schedule: " + error);
    return std::nullopt;
  }
  mlir::FailureOr<ModelPipelineCost> cost =
      computePipelineCost(forward, RooflineRates());
  if (mlir::failed(cost))
    return std::nullopt;
  std::optional<StageLayers> split =
      chooseStageLayers(cost->parts, compileStageLayers, *streams, config.shape,
                        ModelPipelineCost::forwardShare, &error);
  if (!split) {
    if (!compileStageLayers.empty()) {
      reportError("compile", error);
      return std::nullopt;
    }
    reportError("compile",
                "--pp " + std::to_string(stages) +
                    (compileChunks > 1
                         ? " --chunks " + std::to_string(compileChunks) + " (" +
                               std::to_string(config.shape.virtualStages()) +
                               " virtual stages)"
                         : std::string()) +
                    ": " + error);
    return std::nullopt;
  }
  config.layers = *split;
  return config;
}
} // namespace

int runCompileCommand() {
  // Options checked before the model is read.
  if (std::string invalid = checkOptimizerHyperparameters(
          compileLearningRate, compileBeta1, compileBeta2, compileEpsilon,
          compileWeightDecay,
          {"--lr", "--beta1", "--beta2", "--adam-eps", "--weight-decay"});
      !invalid.empty())
    return reportError("compile", invalid);
  if (!std::isfinite(compileBucketMiB) || compileBucketMiB <= 0)
    return reportError(
        "compile", llvm::formatv("--bucket-mib: expected a finite size > 0, "
                                 "found {0}",
                                 llvm::format("%g", compileBucketMiB.getValue())));
  std::optional<ParallelDegrees> degrees = resolveParallelDegrees();
  if (!degrees)
    return 1;
  if (compileMicroBatches < 1 || compileBatch % compileMicroBatches != 0)
    return reportError(
        "compile",
        llvm::formatv("--microbatches: expected a positive divisor of the "
                      "batch ({0}), found {1}",
                      compileBatch.getValue(), compileMicroBatches.getValue()));
  // One step function: the passes have nothing to run in parallel.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  mlir::DefaultTimingManager timing;
  timing.setEnabled(compileTiming);
  timing.setOutput(mlir::createOutputStrategy(
      mlir::DefaultTimingManager::OutputFormat::Text, llvm::errs()));
  mlir::TimingScope rootTiming = timing.getRootScope();
  mlir::TimingScope loadTiming = rootTiming.nest("load model");
  // The forward describes one micro-batch; the step takes them all.
  std::optional<LoadedModel> model =
      loadModel(context, compileInput,
                {compileBatch / compileMicroBatches, compileSeq}, "compile");
  if (!model)
    return 1;
  loadTiming.stop();
  if (model->metadata.get("batch"))
    model->metadata["batch"] = compileBatch.getValue();
  model->metadata["micro_batches"] = compileMicroBatches.getValue();
  // The compute dtype: checkpoints store the model's weights in it.
  model->metadata["precision"] = compilePrecision.getValue();
  mlir::ModuleOp module = model->module.get();
  int64_t modelParameters = countModelParameters(module);
  bool wantsGradients = compileOptimizer == "none";
  llvm::StringRef stepName = wantsGradients ? "gradients" : "train_step";

  if (module.lookupSymbol<mlir::func::FuncOp>(stepName) &&
      (compileMicroBatches != 1 || degrees->pipeline != 1))
    return reportError(
        "compile",
        llvm::Twine(compileMicroBatches != 1 ? "--microbatches" : "--pp") +
            ": expected a @forward to differentiate, found an "
            "existing @" +
            stepName);
  if (degrees->pipeline == 1)
    for (const cl::Option *option : std::initializer_list<const cl::Option *>{
             &compileSchedule, &compileChunks, &compileStageLayers})
      if (option->getNumOccurrences())
        return reportError("compile", "--" + option->ArgStr +
                                          " orders or splits pipeline "
                                          "stages: expected --pp > 1");
  std::optional<PipelineRequest> pipeline;
  if (degrees->pipeline != 1) {
    if (degrees->pipeline < 1)
      return reportError("compile", "--pp: expected a positive number of "
                                    "stages, found " +
                                        std::to_string(degrees->pipeline));
    auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!forward)
      return reportError("compile", "--pp: expected a function @forward");
    pipeline = planPipeline(forward, degrees->pipeline);
    if (!pipeline)
      return 1;
    llvm::json::Array layers;
    for (int64_t count : pipeline->layers)
      layers.push_back(count);
    model->metadata["pipeline"] = llvm::json::Object{
        {"schedule", compileSchedule.getValue()},
        {"stages", degrees->pipeline},
        {"chunks", compileChunks.getValue()},
        {"stage_layers", std::move(layers)},
    };
  }
  // One pass manager, built from the phases' builders: autodiff (unless
  // the input is a step already), sharding, and the pipeline phase for a
  // step of micro-batches (pipelined or not: it runs as one program per
  // stage of action programs, each written once, and a schedule).
  mlir::PassManager pm(&context);
  // The IR is verified once, after the last pass (between passes it costs
  // a walk of the whole step each time); trellis-opt verifies after each.
  pm.enableVerifier(false);
  mlir::TimingScope passTiming = rootTiming.nest("passes");
  pm.enableTiming(passTiming);
  if (!module.lookupSymbol<mlir::func::FuncOp>(stepName)) {
    TrainingOptions options;
    if (compileOptimizer == "none")
      options.optimizer = std::nullopt;
    else if (compileOptimizer == "sgd")
      options.optimizer = OptimizerKind::Sgd;
    else if (compileOptimizer != "adamw")
      return reportError("compile", "unknown optimizer '" + compileOptimizer +
                                        "': expected adamw, sgd or none");
    options.learningRate = compileLearningRate;
    options.beta1 = compileBeta1;
    options.beta2 = compileBeta2;
    options.epsilon = compileEpsilon;
    options.weightDecay = compileWeightDecay;
    options.decayOneDimensional = compileDecayOneDimensional;
    if (compilePrecision == "bf16")
      options.precision = LowPrecision::BF16;
    else if (compilePrecision == "fp16")
      options.precision = LowPrecision::F16;
    else if (compilePrecision != "fp32")
      return reportError("compile", "unknown precision '" + compilePrecision +
                                        "': expected fp32, bf16 or fp16");
    if (compilePrecision == "fp16" && !options.optimizer)
      return reportError("compile",
                         "--precision fp16 scales the loss dynamically, and "
                         "the optimizer unscales and skips overflowing "
                         "steps: expected --optimizer adamw or sgd, found "
                         "none");
    if (compileGradReduceDtype == "bf16" && compilePrecision != "bf16")
      return reportError("compile", "--grad-reduce-dtype bf16 reduces the "
                                    "gradients of a bf16 step: expected "
                                    "--precision bf16, found " +
                                        compilePrecision);
    if (compileGradReduceDtype != "fp32" && compileGradReduceDtype != "bf16")
      return reportError("compile", "unknown --grad-reduce-dtype '" +
                                        compileGradReduceDtype +
                                        "': expected fp32 or bf16");
    if (compileGradReduceDtype == "bf16" &&
        (compileMicroBatches != 1 || degrees->pipeline != 1))
      return reportError(
          "compile",
          "--grad-reduce-dtype bf16 reduces each micro-batch's gradients "
          "before they are accumulated in fp32 (micro-batches times the "
          "traffic of fp32 reductions): expected one micro-batch and no "
          "pipeline, found --microbatches " +
              std::to_string(compileMicroBatches.getValue()));
    options.reduceGradientsInCompute = compileGradReduceDtype == "bf16";
    options.microBatches = compileMicroBatches;
    if (compileRecompute == "full")
      options.recompute = RecomputeKind::Full;
    else if (compileRecompute == "selective")
      options.recompute = RecomputeKind::Selective;
    else if (compileRecompute != "none")
      return reportError("compile", "unknown recomputation '" +
                                        compileRecompute +
                                        "': expected none, selective or full");
    options.pipelined = pipeline.has_value();
    buildTrainingPipeline(pm, options);
  }
  if (compileZero < 0 || compileZero > 3)
    return reportError("compile", "--zero: expected a ZeRO stage 0, 1, 2 or "
                                  "3, found " +
                                      std::to_string(compileZero.getValue()));
  if (compileZero > 0 && degrees->dataParallel <= 1)
    return reportError(
        "compile", "--zero " + std::to_string(compileZero.getValue()) +
                       " shards model states over the data-parallel axis: "
                       "expected --dp > 1 or a dp axis in --mesh, found dp=" +
                       std::to_string(degrees->dataParallel));
  if (compileZero > 0 && compileZero < 3 && compileOptimizer != "adamw" &&
      compilePrecision == "fp32")
    return reportError(
        "compile", "--zero " + std::to_string(compileZero.getValue()) +
                       " shards optimizer states (AdamW's moments, mixed "
                       "precision's fp32 masters), and --optimizer " +
                       compileOptimizer + " in fp32 has none: expected "
                       "--optimizer adamw, --precision bf16 or fp16, or "
                       "--zero 3");
  if (compileSequenceParallel && degrees->tensorParallel <= 1)
    return reportError("compile",
                       "--sp splits the norm regions along the sequence over "
                       "the tensor-parallel axis: expected --tp > 1 or a tp "
                       "axis in --mesh, found tp=" +
                           std::to_string(degrees->tensorParallel));
  if (compileContextKind != "ulysses" && compileContextKind != "ring" &&
      compileContextKind != "allgather")
    return reportError("compile", "unknown --cp-kind '" + compileContextKind +
                                      "': expected ring, ulysses or allgather");
  if (degrees->contextParallel < 1)
    return reportError("compile", "--cp: expected a positive degree, found " +
                                      std::to_string(degrees->contextParallel));
  if (degrees->dataParallel != 1 || degrees->tensorParallel != 1 ||
      degrees->contextParallel != 1) {
    ShardingOptions sharding;
    sharding.zeroStage = compileZero;
    sharding.sequenceParallel = compileSequenceParallel;
    sharding.contextParallel = degrees->contextParallel;
    sharding.contextKind = compileContextKind;
    sharding.function = stepName.str();
    sharding.dataParallel = degrees->dataParallel;
    sharding.tensorParallel = degrees->tensorParallel;
    sharding.bucketBytes = static_cast<int64_t>(compileBucketMiB * (1 << 20));
    sharding.bucketsPerPart = pipeline.has_value();
    sharding.explain = compileExplain;
    buildShardingPipeline(pm, sharding);
  }
  bool staged = pipeline || compileMicroBatches > 1;
  if (staged) {
    PipelinePhaseOptions phase;
    phase.function = stepName.str();
    if (pipeline) {
      phase.stages = pipeline->shape.ranks;
      phase.chunks = pipeline->shape.chunks;
      phase.schedule = pipeline->kind;
      phase.layers = pipeline->layers;
      if (degrees->tensorParallel > 1)
        phase.pieceAxis = "tp";
      for (const auto &[name, size] : degrees->axes)
        phase.meshOrder.push_back(name);
    }
    buildPipelinePhase(pm, phase);
  }
  if (compileFuse)
    pm.addPass(trellis::graph::createFuseElementwisePass());
  if (mlir::failed(pm.run(module)))
    return 1;
  passTiming.stop();
  mlir::TimingScope verifyTiming = rootTiming.nest("verify");
  if (mlir::failed(mlir::verify(module)))
    return 1;
  verifyTiming.stop();
  llvm::SmallVector<mlir::func::FuncOp> stages;
  if (staged) {
    mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>> found =
        findStageFunctions(module, stepName);
    if (mlir::failed(found))
      return 1;
    stages = std::move(*found);
  }
  auto step = module.lookupSymbol<mlir::func::FuncOp>(stepName);
  // The reports walk every rank's schedule: only when asked for, or for
  // the price of ZeRO-2/3 with a pipeline.
  bool warnsOfZero = pipeline && compileZero >= 2 && degrees->dataParallel > 1;
  std::vector<RankReport> reports;
  bool reporting = compileReport || !compileReportJson.empty();
  if (reporting || warnsOfZero)
    reports = staged ? reportStages(stages, compileMicroBatches, reporting)
                     : reportStep(step);
  if (warnsOfZero)
    warnPipelinedZero(compileZero, compileMicroBatches, degrees->dataParallel,
                      reports);
  if (compileReport)
    printReports(reports);
  if (!compileReportJson.empty() &&
      !writeReportJson(compileReportJson, modelParameters, degrees->axes,
                       reports))
    return 1;

  std::string error;
  auto output = mlir::openOutputFile(compileOutput, &error);
  if (!output)
    return reportError("compile", error);
  if (compileEmit == EmitKind::Mlir) {
    module.print(output->os());
    output->keep();
    return 0;
  }
  PlanMetadata metadata{std::move(model->metadata)};
  metadata.fields["optimizer"] = llvm::json::Object{
      {"kind", compileOptimizer.getValue()},
      {"learning_rate", compileLearningRate.getValue()},
      {"beta1", compileBeta1.getValue()},
      {"beta2", compileBeta2.getValue()},
      {"epsilon", compileEpsilon.getValue()},
      {"weight_decay", compileWeightDecay.getValue()},
  };
  mlir::TimingScope emitTiming = rootTiming.nest("emit plan");
  mlir::FailureOr<llvm::json::Value> plan =
      staged ? emitStagedPlan(module, stepName, std::move(metadata))
             : emitPlan(step, std::move(metadata));
  if (mlir::failed(plan))
    return 1;
  emitTiming.stop();
  mlir::TimingScope writeTiming = rootTiming.nest("write plan");
  // The plan opens with the CRC-32 of the rest (verifyPlanChecksum), so
  // that a changed byte is "corrupt plan", never a different run.
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << *plan;
  stream.flush();
  output->os() << llvm::format("{\"checksum\":\"crc32:%08x\",",
                               llvm::crc32(llvm::ArrayRef<uint8_t>(
                                   reinterpret_cast<const uint8_t *>(text.data()),
                                   text.size())))
               << llvm::StringRef(text).drop_front() << "\n";
  writeTiming.stop();
  output->keep();
  return 0;
}

} // namespace trellis::driver
