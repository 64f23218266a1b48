//===- StepReport.h - What one rank holds and sends per step ----*- C++ -*-===//
//
// A summary of a (partitioned) training step for `trellis compile
// --report` and `--report-json`: the model states one rank holds
// (parameters, gradients, optimizer states, ZeRO's accounting), its static
// memory plan (the persistent buffers plus the arena of temporaries, placed
// as the runtime places them), and the communication of one step by
// collective kind and mesh axes, with the bytes each rank puts on the wire
// (ring algorithms).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_ANALYSIS_STEPREPORT_H
#define TRELLIS_ANALYSIS_STEPREPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace trellis {

struct OpContract;

struct StepReport {
  /// Elements of the parameters this rank holds (its pieces), and of the
  /// whole parameters those are pieces of (the model part it runs).
  int64_t parameterCount = 0;
  int64_t stageParameterCount = 0;
  /// Of `parameterCount`, the elements of mixture-of-experts weights; the
  /// experts of one MoE layer this rank holds (expert parallelism splits
  /// them) and the model has (0: no MoE layer).
  int64_t expertParameterCount = 0;
  int64_t expertsPerLayer = 0;
  int64_t modelExpertsPerLayer = 0;
  /// Bytes of the pieces this rank holds.
  int64_t parameterBytes = 0;
  /// The gradients as the step keeps them: each value a micro-batch hands
  /// to the step for an update (accumulated over micro-batches, reduced
  /// over data-parallel ranks after), in its dtype and layout. ZeRO-2 and
  /// ZeRO-3 keep the reduce-scattered piece, the other stages the whole.
  int64_t gradientBytes = 0;
  /// AdamW moments and fp32 master weights.
  int64_t optimizerStateBytes = 0;
  /// The static memory plan: arguments, results and accumulators (own
  /// allocations), and the arena of all other buffers; `totalPeakBytes` is
  /// their sum, what `trellis run` reports as the rank's buffers.
  int64_t persistentBytes = 0;
  int64_t arenaBytes = 0;
  int64_t totalPeakBytes = 0;
  /// Floating-point operations of the graph ops the rank runs in one step
  /// (each micro-batch's), from the op table's costs: a multiply-add is 2.
  double flops = 0;
  /// The same by op ("matmul", "attention_grad"), as the runtime's profile
  /// names them: a kernel's achieved rate is its flops over its time.
  std::map<std::string, double> flopsByOp;
  /// Per model part ("layer 3"), the bytes of one micro-batch's forward
  /// values the backward reads (the activations a layer keeps).
  std::map<std::string, int64_t> savedActivationBytes;
  struct Traffic {
    int64_t count = 0;
    /// Bytes of the operands handed to the collective on one rank.
    int64_t bytes = 0;
    /// Bytes this rank sends with a ring algorithm over a group of n: an
    /// all_reduce of B bytes 2(n-1)/n B, a reduce_scatter of B (its input)
    /// (n-1)/n B, an all_gather of B (its result) (n-1)/n B, an all_to_all
    /// of B (n-1)/n B, a broadcast B, a point-to-point send or receive B.
    int64_t wireBytes = 0;
  };
  /// Keyed by "all_reduce over dp".
  std::map<std::string, Traffic> communication;

  /// Wire bytes by collective kind ("all_reduce", ..., "send", "recv").
  std::map<std::string, int64_t> wireBytesByKind() const;
  /// Model states (parameters + gradients + optimizer states) per rank.
  int64_t modelStateBytes() const {
    return parameterBytes + gradientBytes + optimizerStateBytes;
  }
  void print(llvm::raw_ostream &os) const;
  /// The rank's entry of --report-json (docs/Report.md).
  llvm::json::Object toJson() const;
};

/// Whether an argument's `graph.role` names an optimizer state (AdamW's
/// moments, fp32 master weights): what StepReport::optimizerStateBytes and
/// the cost query count.
bool isOptimizerStateRole(llvm::StringRef role);

/// Traffic by collective and mesh axes ("all_reduce over dp").
using TrafficByCollective = std::map<std::string, StepReport::Traffic>;

/// Wire bytes by collective kind ("all_reduce", ..., "send", "recv"; every
/// kind present, 0 when unused).
std::map<std::string, int64_t>
wireBytesByKind(const TrafficByCollective &communication);

/// `{key: {"calls", "bytes", "wire_bytes"}}` (docs/Report.md).
llvm::json::Object trafficJson(const TrafficByCollective &communication);

/// Bytes one rank sends for a collective of `kind` ("all_reduce",
/// "reduce_scatter", "all_gather", "all_to_all", else a broadcast or
/// permute) over a group of `groupSize` ranks, handed `inBytes` and making
/// `outBytes`, under ring algorithms (StepReport::Traffic::wireBytes).
int64_t ringWireBytes(llvm::StringRef kind, int64_t groupSize, int64_t inBytes,
                      int64_t outBytes);

/// The op table's row of a graph op or a collective, or null.
const OpContract *planContractOf(mlir::Operation *op);

/// Whether `op`'s kernel communicates over its `axes` (kernelCommunicates:
/// a cross-entropy over split classes), so that the runtime waits for
/// every collective in flight before it.
bool kernelCommunicatesAt(mlir::Operation *op);

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
  /// A transfer's channel and the stage at the other end.
  int64_t channel = -1, peer = -1;
  /// A send's completion: the index of the item of its rank from which its
  /// peer is known to have received it (planItemSendCompletions), else -1:
  /// it completes by the end of the step.
  int64_t completesAt = -1;
};

/// Sets `completesAt` on the sends of every stage's items (`stages[s]`:
/// stage s's, `microBatches` per step) as the runtime finds them
/// (planSendCompletions over all stages' memory-plan programs).
void planItemSendCompletions(
    llvm::MutableArrayRef<llvm::SmallVector<RankItem>> stages,
    int64_t microBatches);

/// Computes the report of `step` (per rank: its types are local).
StepReport computeStepReport(mlir::func::FuncOp step);

/// The report of a rank that holds `arguments` (indices) of `step` and
/// runs `items` in order (a pipeline stage's schedule); `microBatches`
/// copies of each input are held (one per micro-batch). Without
/// `withMemoryPlan` the arena is not placed (arenaBytes, totalPeakBytes
/// stay 0): the model states and the communication only.
StepReport computeRankReport(mlir::func::FuncOp step,
                             llvm::ArrayRef<int64_t> arguments,
                             llvm::ArrayRef<RankItem> items,
                             int64_t microBatches = 1,
                             bool withMemoryPlan = true);

} // namespace trellis

#endif // TRELLIS_ANALYSIS_STEPREPORT_H
