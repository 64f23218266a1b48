//===- PipelineCost.h - Part costs for pipeline stage splits -*- C++ -*-===//
//
// Estimates, from an imported model's forward function, what each part
// (embedding, every layer, head with loss) costs a pipeline stage: time by a
// roofline over the ops' FLOPs and bytes, memory as weights with their
// gradients and AdamW moments plus the activations one micro-batch saves.
// Parts are told apart by the importer's locations: `embedding`, `head`,
// and the layer's parameter prefix (`transformer.h.N`, `model.layers.N`).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_PIPELINECOST_H
#define TRELLIS_ANALYSIS_PIPELINECOST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "trellis/Common/StageSplit.h"

namespace trellis {

/// Parts of a model, as `modelPartOf` names them: a layer index, or one of
/// these.
constexpr int64_t kEmbeddingPart = -1;
constexpr int64_t kHeadPart = -2;

/// The part `op` belongs to by its location (`embedding`, `head`,
/// `transformer.h.N` or `model.layers.N`), or nullopt for any other
/// location.
std::optional<int64_t> modelPartOf(mlir::Operation *op);

/// The machine a stage runs on, for the roofline.
struct RooflineRates {
  double flopsPerSecond = 1e11;
  double bytesPerSecond = 1e10;
};

/// Part costs of `forward` with time in seconds and memory in bytes. The
/// time covers forward and backward (backward taken as twice the forward);
/// `forwardShare` of it is the forward. Fails with a diagnostic on an op
/// whose location names no part (a model not imported from a config).
struct ModelPipelineCost {
  StagedModelCost parts;
  /// Saved activations of one micro-batch per part, in bytes (in `parts`
  /// too, inside memory).
  StagedModelCost activations;
  /// Bytes one micro-batch sends across the busiest boundary between
  /// consecutive parts (the values one part makes and a later one uses:
  /// the residual stream, and anything else computed once and reused).
  double boundaryBytes = 0;
  static constexpr double forwardShare = 1.0 / 3.0;
};
mlir::FailureOr<ModelPipelineCost>
computePipelineCost(mlir::func::FuncOp forward, const RooflineRates &rates);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_PIPELINECOST_H
