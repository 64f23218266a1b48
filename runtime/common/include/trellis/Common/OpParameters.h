//===- OpParameters.h - An op's attributes as its kernels read them -*- C++
//-*-===//
//
// Each family of the op table reads its rows' attributes into one typed
// struct, decoded once by the row's own code (OpContract::parameters,
// beside the row in lib/ops/) after the attributes were validated: the
// plan loader decodes every instruction once, and every backend's kernels
// read the same struct instead of looking attributes up by name at each
// launch. An attribute an instance leaves out reads as its default below
// (the row's documented default).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_OPPARAMETERS_H
#define TRELLIS_COMMON_OPPARAMETERS_H

#include "trellis/Common/ExpertRouting.h"
#include "trellis/Common/LearningRate.h"
#include "trellis/Common/UnaryFunctions.h"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace trellis {

/// How a collective combines its members' values (`kind`).
enum class ReduceKind { Sum, Max, Min };

/// The kind `text` names ("sum", "max", "min"), or nullopt.
inline std::optional<ReduceKind> parseReduceKind(const std::string &text) {
  if (text == "sum")
    return ReduceKind::Sum;
  if (text == "max")
    return ReduceKind::Max;
  if (text == "min")
    return ReduceKind::Min;
  return std::nullopt;
}

/// fill: every element `value` (the result's shape is its type's);
/// constant: the elements `values`, in row-major order.
struct FillParameters {
  double value = 0;
  std::vector<double> values;
};

/// The most values a constant instruction holds.
constexpr int64_t kMaxConstantValues = 512;

/// unary_grad: the function whose derivative it applies.
struct UnaryGradParameters {
  UnaryFunction function = UnaryFunction::Neg;
};

/// scale: x * factor.
struct ScaleParameters {
  double factor = 1;
};

/// accumulate: the step's first add into its total writes it (the runtime
/// sets `first` per micro-batch).
struct AccumulateParameters {
  bool first = false;
};

/// fused_elementwise: its program's instructions (FusedProgram.h), parsed
/// against the operands' dtypes when a backend prepares it.
struct FusedElementwiseParameters {
  std::vector<std::string> program;
};

/// reduce_sum, reduce_mean, reduce_max: the dimensions reduced.
struct ReductionParameters {
  std::vector<int64_t> dims;
  bool keepDims = false;
};

/// The layout family, each member reading its own fields: transpose's
/// `permutation`, slice's `offsets`, pad's `low` (zeros before each
/// dimension), concat's `dim`. broadcast_to and reshape take the result's
/// shape from its type.
struct LayoutParameters {
  std::vector<int64_t> permutation;
  std::vector<int64_t> offsets;
  std::vector<int64_t> low;
  int64_t dim = 0;
};

/// matmul and matmul_accumulate (`first`: the step's first add writes its
/// total).
struct MatmulParameters {
  bool transposeLhs = false;
  bool transposeRhs = false;
  bool f32Result = false;
  bool first = false;
};

/// layer_norm, rms_norm and their gradients.
struct NormParameters {
  double epsilon = 0;
};

/// embedding and embedding_grad: the rank's first vocabulary row of a table
/// split over `axes` (`vocabOffset` plus its place times its rows), and the
/// row whose gradient stays zero (-1: none).
struct EmbeddingParameters {
  int64_t vocabOffset = 0;
  int64_t paddingIndex = -1;
};

/// rope (`frequencies`, one per pair; `inverse`: the rotation's gradient;
/// `interleaved`: the pairs (2i, 2i + 1), else (i, i + dim / 2)) and
/// positions; `chunks`: the sequence's zigzag order (SequenceChunks.h, 0
/// or 1: in order).
struct PositionParameters {
  std::vector<double> frequencies;
  bool inverse = false;
  bool interleaved = false;
  int64_t chunks = 0;
};

/// cross_entropy and its gradient: the token count the summed loss is
/// divided by (0: the local tokens).
struct LossParameters {
  int64_t normalizer = 0;
};

/// The attention family: the scores' scale, the mask (causal, with a
/// sliding `window` > 0), Gemma 2's `softcap` (0: none), the sequence's
/// zigzag `chunks`, ring attention's key block `shift`, and the operand
/// indices of ALiBi's `slopes` and of the `sinks` (-1: none; from the
/// instruction's operandSegmentSizes).
struct AttentionParameters {
  double scale = 1;
  bool causal = true;
  int64_t window = 0;
  double softcap = 0;
  int64_t chunks = 0;
  int64_t shift = 0;
  int64_t slopesOperand = -1;
  int64_t sinksOperand = -1;
};

/// The expert family: the router's attributes (moe_route, moe_route_grad;
/// `routing.experts` is the logits' last dimension, which the kernel
/// knows), the grouped products' layout and dispatch (all_to_all: each
/// product exchanges its slots' rows over its axes), and the load-balancing
/// bias update's `rate`.
struct ExpertParameters {
  ExpertRouting routing;
  bool transposeRhs = false;
  bool allToAll = false;
  double rate = 0;
};

/// adamw and sgd; `schedule`: the scheduled learning rate (lr_schedule),
/// else `learningRate` at every step.
struct OptimizerParameters {
  double learningRate = 0;
  double weightDecay = 0;
  double beta1 = 0;
  double beta2 = 0;
  double epsilon = 0;
  std::optional<LrSchedule> schedule;
};

/// The collective and point-to-point families, each member reading its
/// own fields: all_reduce's and reduce_scatter's `kind`, all_gather's,
/// reduce_scatter's and slice_shard's `dim`, all_to_all's `splitDim` and
/// `concatDim`, broadcast's `root`, collective_permute's `shift`, send's and
/// recv's `peer` and `channel`.
struct CollectiveParameters {
  ReduceKind kind = ReduceKind::Sum;
  int64_t dim = 0;
  int64_t splitDim = 0;
  int64_t concatDim = 0;
  int64_t root = 0;
  int64_t shift = 0;
  int64_t peer = 0;
  int64_t channel = 0;
};

/// The families' parameters; std::monostate for the families that read no
/// attribute (binary, unary, cast, row-wise).
using OpParameters = std::variant<
    std::monostate, FillParameters, UnaryGradParameters, ScaleParameters,
    AccumulateParameters, FusedElementwiseParameters, ReductionParameters,
    LayoutParameters, MatmulParameters, NormParameters, EmbeddingParameters,
    PositionParameters, LossParameters, AttentionParameters, ExpertParameters,
    OptimizerParameters, CollectiveParameters>;

} // namespace trellis

#endif // TRELLIS_COMMON_OPPARAMETERS_H
