//===- Passes.h - Autodiff passes -------------------------------*- C++ -*-===//

#ifndef TRELLIS_AUTODIFF_PASSES_H
#define TRELLIS_AUTODIFF_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "trellis/Common/OpFamilies.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace trellis {

/// The compute dtype of mixed-precision training.
enum class LowPrecision { BF16, F16 };

/// Which activations the backward recomputes instead of keeping: `none` and
/// `selective` (the attention core, which the fused attention gradient
/// always recomputes) are the same program; `full` recomputes each model
/// part's forward.
enum class RecomputeKind { None, Selective, Full };

#define GEN_PASS_DECL
#include "trellis/Autodiff/Passes.h.inc"

/// How the caller calls the optimizer's hyperparameters in messages (the
/// driver's flags, or the pass's options).
struct HyperparameterNames {
  const char *learningRate, *beta1, *beta2, *epsilon, *weightDecay;
};

/// Why these optimizer hyperparameters cannot train ("" when they can): a
/// learning rate and weight decay finite and >= 0, betas in [0, 1), an
/// epsilon finite and > 0. trellis-insert-optimizer and the driver (before
/// it loads the model) both ask.
std::string checkOptimizerHyperparameters(double learningRate, double beta1,
                                          double beta2, double epsilon,
                                          double weightDecay,
                                          const HyperparameterNames &names);

#define GEN_PASS_REGISTRATION
#include "trellis/Autodiff/Passes.h.inc"

/// What the autodiff phase makes of `@forward`.
struct TrainingOptions {
  /// An optimizer, or none: the step returns the gradients (@gradients).
  std::optional<OptimizerKind> optimizer = OptimizerKind::AdamW;
  double learningRate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  double weightDecay = 0.0;
  /// Whether 1-D parameters (biases, norm gains) are decayed too.
  bool decayOneDimensional = false;
  /// A learning-rate schedule (AdamW), peaking at learningRate: its kind
  /// (trellis/Common/LearningRate.h), or "" for a constant rate.
  std::string lrSchedule;
  int64_t warmupSteps = 0, decaySteps = 0, wsdDecaySteps = 0;
  double minLearningRate = 0;
  /// Clip the updates' gradients to this global norm (-trellis-clip-gradients).
  std::optional<double> clipGradNorm;
  /// Move the routers' score biases by this each step
  /// (-trellis-expert-bias-update).
  std::optional<double> expertBiasUpdate;
  /// Mixed precision: the forward and backward compute in this dtype, from
  /// fp32 master weights; none: everything in fp32. f16 with an optimizer
  /// also scales the loss dynamically (a loss_scale argument).
  std::optional<LowPrecision> precision;
  /// With `precision`: reduce data-parallel gradients in the compute dtype
  /// (else in f32).
  bool reduceGradientsInCompute = false;
  /// Micro-batches per step (gradient accumulation); @forward describes
  /// one.
  int64_t microBatches = 1;
  RecomputeKind recompute = RecomputeKind::None;
  /// Write weight-gradient products as f32 gradients, and with
  /// `fuseIntoTotals` add those summed over micro-batches into their totals
  /// (-trellis-fuse-gradient-accumulation).
  bool fuseGradientAccumulation = false;
  bool fuseIntoTotals = true;
  /// Write the step as micro-batches even for one (a pipeline splits it).
  bool pipelined = false;
};

/// Adds reverse mode, recomputation, micro-batch accumulation and the
/// optimizer for `options` (each pass only where it has work).
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingOptions &options);

/// Registers `trellis-autodiff` (the phase with its options) with
/// trellis-opt.
void registerTrainingPipeline();

} // namespace trellis

#endif // TRELLIS_AUTODIFF_PASSES_H
