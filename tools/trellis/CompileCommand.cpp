//===- CompileCommand.cpp - `trellis compile` -----------------------------===//
//
// Model (config.json or MLIR) -> training step (autodiff + optimizer) ->
// plan file for the runtime: the command line of the compiler library
// (trellis/Compiler/Compile.h).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "trellis/Compiler/Compile.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

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

/// The compiler library's options from the command line: an option not
/// given stays unset where its absence means something (the mesh, the
/// pipeline's options).
CompileOptions compileOptions() {
  auto given = [](const auto &option) -> std::optional<
                                          std::decay_t<decltype(option.getValue())>> {
    if (option.getNumOccurrences() == 0)
      return std::nullopt;
    return option.getValue();
  };
  CompileOptions options;
  options.batch = compileBatch;
  options.seq = compileSeq;
  options.microBatches = compileMicroBatches;
  options.mesh = given(compileMesh);
  options.dataParallel = given(compileDataParallel);
  options.tensorParallel = given(compileTensorParallel);
  options.pipeline = given(compilePipeline);
  options.contextParallel = given(compileContextParallel);
  options.schedule = given(compileSchedule);
  options.chunks = given(compileChunks);
  options.stageLayers = given(compileStageLayers);
  options.zero = compileZero;
  options.sequenceParallel = compileSequenceParallel;
  options.contextKind = compileContextKind;
  options.bucketMiB = compileBucketMiB;
  options.optimizer = compileOptimizer;
  options.learningRate = compileLearningRate;
  options.beta1 = compileBeta1;
  options.beta2 = compileBeta2;
  options.epsilon = compileEpsilon;
  options.weightDecay = compileWeightDecay;
  options.decayOneDimensional = compileDecayOneDimensional;
  options.precision = compilePrecision;
  options.gradReduceDtype = compileGradReduceDtype;
  options.recompute = compileRecompute;
  options.fuse = compileFuse;
  options.explain = compileExplain;
  options.emitMlir = compileEmit == EmitKind::Mlir;
  options.report = compileReport || !compileReportJson.empty();
  return options;
}

void printCompileMessage(MessageKind kind, const llvm::Twine &message) {
  printMessage("compile", kind, message);
}
} // namespace

int runCompileCommand() {
  // Options checked before the model is read.
  CompileOptions options = compileOptions();
  if (mlir::failed(checkCompileOptions(options, printCompileMessage)))
    return 1;
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
  mlir::FailureOr<CompiledModel> compiled = compileModel(
      std::move(*model), options, printCompileMessage, rootTiming);
  if (mlir::failed(compiled))
    return 1;
  if (compileReport)
    printReports(compiled->reports, llvm::errs());
  if (!compileReportJson.empty()) {
    std::string error;
    auto output = mlir::openOutputFile(compileReportJson, &error);
    if (!output)
      return reportError("compile", "--report-json: " + error);
    output->os() << llvm::formatv(
                        "{0:2}", reportJson(compiled->modelParameters,
                                            compiled->meshAxes,
                                            compiled->reports))
                 << "\n";
    output->keep();
  }
  mlir::TimingScope writeTiming = rootTiming.nest("write plan");
  std::string error;
  auto output = mlir::openOutputFile(compileOutput, &error);
  if (!output)
    return reportError("compile", error);
  output->os() << compiled->text;
  writeTiming.stop();
  output->keep();
  return 0;
}

} // namespace trellis::driver
