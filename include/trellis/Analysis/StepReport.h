//===- StepReport.h - What one rank holds and sends per step ----*- C++ -*-===//
//
// A summary of a (partitioned) training step for `trellis compile
// --report`: the parameters one rank holds, an estimate of its peak live
// activations, and the communication of one step by collective kind and
// mesh axes.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_STEPREPORT_H
#define TRELLIS_ANALYSIS_STEPREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace trellis {

struct StepReport {
  int64_t parameterCount = 0;
  int64_t parameterBytes = 0;
  /// Optimizer states (moments) and the step counter.
  int64_t optimizerStateBytes = 0;
  /// Model states per parameter, ZeRO's accounting: the weights the step
  /// computes with (2 for a bf16 copy, 4 in fp32), their gradients, and the
  /// optimizer's (fp32 moments, plus the fp32 master under mixed precision).
  int64_t weightBytesPerParameter = 4;
  int64_t gradientBytesPerParameter = 4;
  int64_t optimizerBytesPerParameter = 0;
  /// Peak bytes of values live at once, arguments excluded.
  int64_t peakActivationBytes = 0;
  struct Traffic {
    int64_t count = 0;
    /// Bytes of the operands handed to the collective on one rank.
    int64_t bytes = 0;
  };
  /// Keyed by "all_reduce over dp".
  std::map<std::string, Traffic> communication;

  void print(llvm::raw_ostream &os) const;
};

/// One thing a rank runs: an op of the step, or one end of a point-to-point
/// transfer of `value` over `axis` (a pipeline's send or receive), for
/// `microBatch` (-1: once for the step). Each micro-batch's values
/// (graph.phase ops) are its own.
struct RankItem {
  mlir::Operation *op = nullptr;
  mlir::Value value;
  bool sends = false;
  std::string axis;
  int64_t microBatch = -1;
};

/// Computes the report of `step` (per rank: its types are local).
StepReport computeStepReport(mlir::func::FuncOp step);

/// The report of a rank that holds `arguments` (indices) of `step` and
/// runs `items` in order (a pipeline stage's schedule).
StepReport computeRankReport(mlir::func::FuncOp step,
                             llvm::ArrayRef<int64_t> arguments,
                             llvm::ArrayRef<RankItem> items);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_STEPREPORT_H
