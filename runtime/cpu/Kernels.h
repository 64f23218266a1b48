//===- Kernels.h - CPU kernels of plan instructions -------------*- C++ -*-===//
//
// One function per op family, registered by op id in its file
// (KernelTable). Each kernel reads its inputs and writes its
// outputs through the buffer table; shapes and attributes were validated
// when the plan loaded (OpShapes.cpp), so kernels only fail on data
// (e.g. a target id outside the vocabulary).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_CPU_KERNELS_H
#define TRELLIS_RUNTIME_CPU_KERNELS_H

#include "trellis/Common/FusedProgram.h"
#include "trellis/Runtime/Backend.h"
#include "trellis/Runtime/KernelRegistry.h"
#include "trellis/Runtime/OpShapes.h"

#include <optional>

namespace trellis::runtime::cpu {

Status runElementwise(const KernelArgs &args);
Status runLayout(const KernelArgs &args);
Status runReduction(const KernelArgs &args);
/// matmul, and matmul_accumulate: its product added into (the step's
/// first: written to) its f32 total.
Status runMatmul(const KernelArgs &args);
/// Matmul and matmul_accumulate of bf16 operands (oneDNN, AMX where the
/// CPU has it).
Status runMatmulBf16(const KernelArgs &args);
/// Whether oneDNN builds bf16 matmuls on this CPU (probed once).
bool oneDnnHasBf16Matmul();
Status runNormalization(const KernelArgs &args);
Status runEmbedding(const KernelArgs &args);
Status runRope(const KernelArgs &args);
Status runAttention(const KernelArgs &args);
/// Key sequences up to this long run densely (DenseAttention.cpp), longer
/// ones in tiles (BlockedAttention.h). Measured with 2 threads on a tiny
/// Llama step: at 128 keys dense is as fast (1 thread: 30% faster); at
/// 1024 the tiles take 0.70x the time, at 2048 0.63x, at 4096 0.49x with a
/// quarter of the peak memory.
constexpr int64_t kDenseAttentionKeys = 256;
/// Element-wise loops (conversions, binary ops, scales) split over the
/// threads from this many elements: below it, waking them costs more than
/// the loop. Each element's result is the same either way.
constexpr int64_t kParallelElements = int64_t(1) << 15;
/// attention and attention_grad over a head's whole score matrix.
Status runDenseAttention(const KernelArgs &args);
/// Ring attention's attention_block, attention_merge and
/// attention_block_grad.
Status runRingAttention(const KernelArgs &args);
/// Position ids (`positions`).
Status runPositions(const KernelArgs &args);
Status runCrossEntropy(const KernelArgs &args);
Status runOptimizer(const KernelArgs &args);
/// A run of adamw and sgd updates as one pass: their elements split into
/// fixed chunks, one OpenMP loop over every chunk of every update (the
/// element-wise results are those of runOptimizer).
Status runOptimizers(const std::vector<KernelArgs> &updates);

/// A kernel runs one validated instruction.
using Kernel = Status (*)(const KernelArgs &args);

/// `cast` between f32, bf16 and f16.
Status runCast(const KernelArgs &args);
/// Whether an instruction has bf16 or f16 operands or results.
bool hasNarrowOperands(const KernelArgs &args);
/// Runs an f32 `kernel` on fp32 copies of the instruction's 16-bit
/// operands and rounds its 16-bit results back.
Status runInFloat(const KernelArgs &args, Kernel kernel);

/// y = f(x), or with a gradient dy: dx = f'(x) dy, over `n` contiguous f32
/// elements through oneDNN (vectorized, threaded); false when oneDNN has
/// no form of `function`.
bool runUnaryOneDnn(UnaryFunction function, const float *x, const float *dy,
                    float *y, int64_t n);

/// y = f(x) (dy null) or dx = f'(x) dy for a unary function: what the
/// unary ops and unary_grad compute, at any length.
void runUnaryFunction(UnaryFunction function, const float *x, const float *dy,
                      float *y, int64_t n);

/// `fused_elementwise`: one pass over its program (16-bit operands itself).
Status runFusedElementwise(const KernelArgs &args);
/// Whether an elementwise instruction (a binary op, scale, a unary
/// function, unary_grad) has operands and result of one 16-bit dtype:
/// runNarrowElementwise runs those as a one-instruction fused program,
/// widening and rounding per block in cache instead of through whole fp32
/// copies (the same values: each op computes in fp32 and rounds its
/// result either way).
bool isNarrowElementwise(const KernelArgs &args);
Status runNarrowElementwise(const KernelArgs &args);

/// The CPU's kernels, indexed by the op table's ids (KernelRegistry.h).
/// Each kernel file registers the families and members it runs in its
/// register*Kernels function.
using KernelTable = KernelRegistry<Kernel>;

// Each kernel file's registrations.
void registerAttentionKernels(KernelTable &table);
void registerCastKernels(KernelTable &table);
void registerCrossEntropyKernels(KernelTable &table);
void registerElementwiseKernels(KernelTable &table);
void registerEmbeddingKernels(KernelTable &table);
void registerExpertKernels(KernelTable &table);
void registerFusedElementwiseKernels(KernelTable &table);
void registerLayoutKernels(KernelTable &table);
void registerMatmulKernels(KernelTable &table);
void registerNormalizationKernels(KernelTable &table);
void registerOptimizerKernels(KernelTable &table);
void registerReductionKernels(KernelTable &table);
void registerRingAttentionKernels(KernelTable &table);

/// Every kernel file's registrations, made once.
const KernelTable &cpuKernels();

/// The kernel of plan op `op`, or null if the CPU has none.
Kernel findKernel(const std::string &op);

/// What the CPU decides once per instruction (Device::prepare).
struct CpuLaunch : PreparedLaunch {
  Kernel kernel = nullptr;
  /// Its 16-bit operands go through fp32 copies (runInFloat).
  bool throughFloatCopies = false;
  /// The parsed program of a fused or narrow elementwise instruction.
  std::optional<FusedProgram> program;
};

/// The row of the instruction a kernel runs (found when the plan loaded).
inline const OpContract &rowOf(const KernelArgs &args) {
  return args.instruction.row();
}

/// The program a fused or narrow elementwise instruction evaluates, parsed
/// over its operands' dtypes and checked against its result's.
StatusOr<FusedProgram> parseProgramOf(const KernelArgs &args);

/// The kernel for one instruction: its op's, or a 16-bit variant where one
/// exists; `narrowNative` says whether it takes 16-bit operands itself
/// (else they go through fp32 copies).
Kernel selectKernel(const KernelArgs &args, bool &narrowNative);

/// The positions in the sequence of stored indices first ... first +
/// count - 1 of a sequence of `length` tokens kept in the order `chunks`
/// gives (trellis/Common/SequenceChunks.h).
std::vector<int64_t> sequencePositions(int64_t first, int64_t count,
                                       int64_t length, int64_t chunks);

/// A run of consecutive positions: local indices [begin, begin + count)
/// hold positions [position, position + count).
struct PositionRun {
  int64_t begin, count, position;
};
std::vector<PositionRun> positionRuns(const std::vector<int64_t> &positions);

/// Which keys an attention query sees, by position: every key unless
/// `causal`; then those at or before the query's position and, with a
/// `window` W > 0, after its position - W (the attention ops' attributes).
struct AttentionMask {
  bool causal = true;
  int64_t window = 0;

  static AttentionMask of(const KernelArgs &args);
  bool sees(int64_t query, int64_t key) const {
    return !causal || (key <= query && (window <= 0 || key > query - window));
  }
  /// The keys a query at position `query` sees among `count` keys at
  /// consecutive positions first, first + 1, ...: [begin, end) from 0.
  std::pair<int64_t, int64_t> range(int64_t query, int64_t first,
                                    int64_t count) const;
};

/// Gemma 2's soft-capping of a row of scores: x[i] = cap * tanh(x[i] /
/// cap) for i < n; slopes[i] (when not null) the derivative, 1 - tanh^2.
void softCapRow(float *x, int64_t n, float cap, float *slopes);

/// ALiBi on a row of scores: x[j] += slope * (offset + j) for j < n, where
/// offset is the first key's position minus the query's.
void addAlibiRow(float *x, int64_t n, float slope, int64_t offset);

/// y[0, n) = softmax(x[0, n)), with the sum in double. `x` may equal `y`.
void softmaxRow(const float *x, float *y, int64_t n);

} // namespace trellis::runtime::cpu

#endif // TRELLIS_RUNTIME_CPU_KERNELS_H
