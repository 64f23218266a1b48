//===- TrainingPipeline.cpp - The autodiff phase as one pipeline ----------===//

#include "trellis/Autodiff/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace trellis;

void trellis::buildTrainingPipeline(OpPassManager &pm,
                                    const TrainingOptions &options) {
  if (options.precision) {
    MixedPrecisionPassOptions mixed;
    mixed.compute = *options.precision;
    mixed.reduceGradientsInCompute = options.reduceGradientsInCompute;
    mixed.castParamsOnce = !options.pipelined;
    // f16's range needs a loss scale (bf16 has fp32's exponent); the
    // optimizer unscales it, so a step returning gradients has none.
    mixed.dynamicLossScale =
        *options.precision == LowPrecision::F16 && options.optimizer;
    pm.addPass(createMixedPrecisionPass(mixed));
  }
  ReverseModePassOptions reverse;
  // Each micro-batch's backward is seeded with 1/m: the gradients sum to
  // those of the mean loss.
  reverse.lossScale =
      options.microBatches > 0 ? 1.0 / options.microBatches : 1.0;
  reverse.sumPartsInMicroBatch = !options.pipelined;
  pm.addPass(createReverseModePass(reverse));
  if (options.recompute == RecomputeKind::Full)
    pm.addPass(createRecomputePass());
  pm.addPass(createRematerializeParameterViewsPass());
  if (options.microBatches != 1 || options.pipelined) {
    AccumulateMicroBatchesPassOptions accumulate;
    accumulate.microBatches = options.microBatches;
    pm.addPass(createAccumulateMicroBatchesPass(accumulate));
  }
  if (options.fuseGradientAccumulation) {
    FuseGradientAccumulationPassOptions fuse;
    fuse.intoTotals = options.fuseIntoTotals;
    pm.addPass(createFuseGradientAccumulationPass(fuse));
  }
  if (options.optimizer) {
    InsertOptimizerPassOptions optimizer;
    optimizer.optimizer = *options.optimizer;
    optimizer.learningRate = options.learningRate;
    optimizer.beta1 = options.beta1;
    optimizer.beta2 = options.beta2;
    optimizer.epsilon = options.epsilon;
    optimizer.weightDecay = options.weightDecay;
    optimizer.decayOneDimensional = options.decayOneDimensional;
    optimizer.lrSchedule = options.lrSchedule;
    optimizer.warmupSteps = options.warmupSteps;
    optimizer.decaySteps = options.decaySteps;
    optimizer.wsdDecaySteps = options.wsdDecaySteps;
    optimizer.minLearningRate = options.minLearningRate;
    pm.addPass(createInsertOptimizerPass(optimizer));
    // The parameters hold the compute copy, cast once per step from their
    // fp32 masters.
    if (options.precision)
      pm.addPass(createMasterWeightsPass());
    // A loss-scaled step's updates unscale their gradients and skip an
    // overflow themselves, so they run in place.
    if (options.precision == LowPrecision::F16)
      pm.addPass(createGuardUpdatesPass());
    if (options.clipGradNorm) {
      ClipGradientsPassOptions clip;
      clip.maxNorm = *options.clipGradNorm;
      pm.addPass(createClipGradientsPass(clip));
    }
  }
  // Mixtures of experts report how evenly their tokens spread (the step
  // returns its gradients, @gradients, without an optimizer).
  ExpertLoadPassOptions load;
  load.functionName = options.optimizer ? "train_step" : "gradients";
  pm.addPass(createExpertLoadPass(load));
  if (options.optimizer && options.expertBiasUpdate) {
    ExpertBiasUpdatePassOptions bias;
    bias.rate = *options.expertBiasUpdate;
    pm.addPass(createExpertBiasUpdatePass(bias));
  }
}

namespace {

/// The update rule, or none (return the gradients).
enum class OptimizerChoice { AdamW, Sgd, None };

/// fp32 throughout, or a low-precision compute dtype.
enum class PrecisionChoice { F32, BF16, F16 };

/// TrainingOptions as pipeline options of trellis-opt.
struct TrainingPipelineOptions
    : public PassPipelineOptions<TrainingPipelineOptions> {
  Option<OptimizerChoice> optimizer{
      *this, "optimizer", llvm::cl::desc("The update rule"),
      llvm::cl::init(OptimizerChoice::AdamW),
      llvm::cl::values(
          clEnumValN(OptimizerChoice::AdamW, "adamw", "AdamW"),
          clEnumValN(OptimizerChoice::Sgd, "sgd", "SGD"),
          clEnumValN(OptimizerChoice::None, "none",
                     "none: return the gradients (@gradients)"))};
  Option<double> learningRate{*this, "learning-rate",
                              llvm::cl::desc("Learning rate"),
                              llvm::cl::init(1e-3)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(0.999)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("AdamW epsilon"),
                         llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.0)};
  Option<bool> decayOneDimensional{
      *this, "decay-1d",
      llvm::cl::desc("Decay 1-D parameters (biases, norm gains) too"),
      llvm::cl::init(false)};
  Option<PrecisionChoice> precision{
      *this, "precision", llvm::cl::desc("The compute dtype"),
      llvm::cl::init(PrecisionChoice::F32),
      llvm::cl::values(
          clEnumValN(PrecisionChoice::F32, "f32", "fp32 throughout"),
          clEnumValN(PrecisionChoice::BF16, "bf16",
                     "bf16 compute, fp32 master weights"),
          clEnumValN(PrecisionChoice::F16, "f16",
                     "f16 compute, fp32 master weights"))};
  Option<bool> reduceGradientsInCompute{
      *this, "reduce-gradients-in-compute",
      llvm::cl::desc("Reduce data-parallel gradients in the compute dtype"),
      llvm::cl::init(false)};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::desc("Micro-batches per step"),
                               llvm::cl::init(1)};
  Option<RecomputeKind> recompute{
      *this, "recompute", llvm::cl::desc("Activation recomputation"),
      llvm::cl::init(RecomputeKind::None),
      llvm::cl::values(
          clEnumValN(RecomputeKind::None, "none", "keep activations"),
          clEnumValN(RecomputeKind::Selective, "selective",
                     "the attention core (what the fused attention "
                     "gradient always does)"),
          clEnumValN(RecomputeKind::Full, "full",
                     "each model part's forward again before its backward"))};
  Option<bool> pipelined{
      *this, "pipelined",
      llvm::cl::desc("Write the step as micro-batches even for one (a "
                     "pipeline splits it)"),
      llvm::cl::init(false)};
  Option<bool> fuseGradientAccumulation{
      *this, "fuse-gradient-accumulation",
      llvm::cl::desc("Write weight-gradient products as f32 gradients (and "
                     "into their totals over micro-batches)"),
      llvm::cl::init(false)};
  Option<bool> fuseIntoTotals{
      *this, "fuse-into-totals",
      llvm::cl::desc("With fuse-gradient-accumulation: add products summed "
                     "over micro-batches into their totals (off: ZeRO-2 "
                     "and 3)"),
      llvm::cl::init(true)};
};

} // namespace

void trellis::registerTrainingPipeline() {
  PassPipelineRegistration<TrainingPipelineOptions>(
      "trellis-autodiff",
      "The autodiff phase: reverse mode, recomputation, micro-batch "
      "accumulation, optimizer",
      [](OpPassManager &pm, const TrainingPipelineOptions &options) {
        TrainingOptions training;
        if (options.optimizer == OptimizerChoice::None)
          training.optimizer = std::nullopt;
        else
          training.optimizer = options.optimizer == OptimizerChoice::Sgd
                                   ? OptimizerKind::Sgd
                                   : OptimizerKind::AdamW;
        training.learningRate = options.learningRate;
        training.beta1 = options.beta1;
        training.beta2 = options.beta2;
        training.epsilon = options.epsilon;
        training.weightDecay = options.weightDecay;
        training.decayOneDimensional = options.decayOneDimensional;
        if (options.precision == PrecisionChoice::BF16)
          training.precision = LowPrecision::BF16;
        else if (options.precision == PrecisionChoice::F16)
          training.precision = LowPrecision::F16;
        training.reduceGradientsInCompute = options.reduceGradientsInCompute;
        training.microBatches = options.microBatches;
        training.recompute = options.recompute;
        training.pipelined = options.pipelined;
        training.fuseGradientAccumulation = options.fuseGradientAccumulation;
        training.fuseIntoTotals = options.fuseIntoTotals;
        buildTrainingPipeline(pm, training);
      });
}
