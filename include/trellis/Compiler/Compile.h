//===- Compile.h - A model to a training plan -------------------*- C++ -*-===//
//
// The compiler as a library: a loaded model and the options of `trellis
// compile` go through the phases' pass pipelines (autodiff and optimizer,
// sharding, the pipeline phase, fusion) to a plan for the runtime, with
// the per-rank reports. The driver and the C API both call it, so a plan
// built from Python is the plan the command line builds.
//
// Messages about the options name them by their driver flags (--lr,
// --microbatches); the C API's option keys are the same names.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMPILER_COMPILE_H
#define TRELLIS_COMPILER_COMPILE_H

#include "mlir/Support/Timing.h"
#include "trellis/Common/Mesh.h"
#include "trellis/Compiler/CompileReport.h"
#include "trellis/Compiler/MessageSink.h"
#include "trellis/Compiler/ModelSource.h"
#include "trellis/Sharding/ShardingCost.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trellis {

/// Every option of `trellis compile` but its input and outputs. An unset
/// optional is an option not given: `mesh` and the degrees exclude each
/// other, and the pipeline's options need a pipeline.
struct CompileOptions {
  // Model and batch.
  int64_t batch = 8;
  int64_t seq = 64;
  int64_t microBatches = 1;
  // Parallelism.
  std::optional<std::string> mesh;
  std::optional<int64_t> dataParallel, tensorParallel, pipeline,
      contextParallel, expertParallel;
  std::optional<std::string> schedule;
  std::optional<int64_t> chunks;
  std::optional<std::string> stageLayers;
  int64_t zero = 0;
  /// The axes ZeRO shards over, comma-separated (unset: every data and
  /// expert axis).
  std::optional<std::string> zeroAxes;
  bool sequenceParallel = false;
  std::string contextKind = "ulysses";
  std::string expertDispatch = "gather";
  double bucketMiB = 25;
  // Optimizer.
  std::string optimizer = "adamw";
  double learningRate = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8,
         weightDecay = 0;
  bool decayOneDimensional = false;
  /// A learning-rate schedule (AdamW): constant, linear, cosine or wsd
  /// (unset: a constant rate, no warmup).
  std::optional<std::string> lrSchedule;
  int64_t warmupSteps = 0, decaySteps = 0, wsdDecaySteps = 0;
  double minLearningRate = 0;
  /// Clip the gradients' global norm to this (unset: no clipping).
  std::optional<double> clipGradNorm;
  /// Move the routers' score biases by this each step (DeepSeek-V3's
  /// auxiliary-loss-free balancing; unset: the biases stay as loaded).
  std::optional<double> expertBiasUpdate;
  // Precision, memory and fusion.
  std::string precision = "fp32";
  std::string gradReduceDtype = "fp32";
  std::string recompute = "none";
  bool fuse = true;
  /// Write weight-gradient products as f32 gradients, and add each
  /// micro-batch's straight into its total
  /// (-trellis-fuse-gradient-accumulation; ZeRO-2 and 3 reduce-scatter each
  /// product before its sum).
  bool fuseGradientAccumulation = true;
  /// Issue each collective where compute hides it
  /// (-trellis-schedule-collectives).
  bool scheduleCollectives = true;
  // Output.
  /// Remarks on what propagation split and resharded (--explain).
  bool explain = false;
  /// The training step as MLIR instead of a plan (--emit mlir).
  bool emitMlir = false;
  /// The cost query's JSON instead of a plan (--emit estimate): what each
  /// rank computes, holds and sends, priced from the propagated shardings
  /// without partitioning (trellis/Sharding/ShardingCost.h).
  bool emitEstimate = false;
  /// Compute the per-rank reports (with their memory plans).
  bool report = false;
  /// Stop after the reports: no plan text (what the planner asks of the
  /// plans it shows).
  bool reportOnly = false;
};

/// A compiled model.
struct CompiledModel {
  /// The plan (JSON whose first field is the checksum of the rest, then a
  /// newline), the training step as MLIR, or the estimate's JSON.
  std::string text;
  /// Per rank kind, when CompileOptions::report.
  std::vector<RankReport> reports;
  /// Per pipeline rank, when CompileOptions::emitEstimate.
  std::vector<ShardedStepCost> estimate;
  /// The model's parameter count, before any split.
  int64_t modelParameters = 0;
  /// The mesh, major to minor (axes of size 1 included).
  std::vector<MeshAxis> meshAxes;
};

/// Checks what the options alone can tell (ranges, names, the mesh text,
/// the micro-batches dividing the batch); errors go to `sink`.
mlir::LogicalResult checkCompileOptions(const CompileOptions &options,
                                        MessageSink sink);

/// Compiles `model` (its forward describes one micro-batch) with `options`.
/// Option errors go to `sink`; pass failures are diagnostics on the
/// model's context. `timing` (may be a null scope) gets a scope per phase.
mlir::FailureOr<CompiledModel> compileModel(LoadedModel model,
                                            const CompileOptions &options,
                                            MessageSink sink,
                                            mlir::TimingScope &timing);

/// Parses mesh text (`dp=2,tp=2`); on malformed text sends `optionName:1:COL:
/// error: ...` with the text and a caret to `sink`.
std::optional<Mesh> parseMeshText(llvm::StringRef text,
                                  llvm::StringRef optionName,
                                  MessageSink sink);

} // namespace trellis

#endif // TRELLIS_COMPILER_COMPILE_H
