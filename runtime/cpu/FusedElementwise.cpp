//===- FusedElementwise.cpp - One pass over a fused elementwise program ---===//
//
// The result is cut into blocks of kBlock elements, spread over the
// device's OpenMP threads; per block, each input is loaded (broadcast, and
// widened from 16 bits) into a slot of fp32 values, each instruction
// computes its slot from earlier ones in one vectorizable loop (unary
// functions through the same oneDNN eltwise the unfused ops use) and
// rounds it to its dtype, and the last slot is stored. Every element gets
// exactly the value the unfused ops would give it, whatever the blocks.
// A single elementwise op of 16-bit operands runs here too, as a program
// of one instruction (runNarrowElementwise).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "trellis/Common/FusedProgram.h"
#include "trellis/Common/HalfFloat.h"

#include <algorithm>
#include <cstdio>

namespace trellis::runtime::cpu {

namespace {

constexpr int64_t kBlock = 4096;

ElementType elementOf(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return ElementType::BF16;
  case DType::F16:
    return ElementType::F16;
  case DType::I32:
    return ElementType::I32;
  default:
    return ElementType::F32;
  }
}

/// The vector loops are cloned for AVX-512 (picked at load time where the
/// CPU has it; the default build targets SSE2), each called once per run
/// or block.
#define TRELLIS_VECTOR_CLONES                                                  \
  __attribute__((target_clones("avx512f", "default")))

/// slot[0, n) = `tensor`'s elements offset, offset + stride, ..., widened
/// to fp32: one loop per dtype, so each vectorizes.
TRELLIS_VECTOR_CLONES void loadRun(const Tensor &tensor, int64_t offset,
                                   int64_t stride, int64_t n, float *slot) {
  const uint16_t *bits = static_cast<const uint16_t *>(tensor.raw()) + offset;
  const float *values = tensor.f32() + offset;
  DType dtype = tensor.desc().dtype;
  if (stride == 0) {
    float value = dtype == DType::BF16  ? bfloat16ToFloat(bits[0])
                  : dtype == DType::F16 ? halfToFloat(bits[0])
                                        : values[0];
    std::fill(slot, slot + n, value);
    return;
  }
  switch (dtype) {
  case DType::BF16:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      slot[i] = bfloat16ToFloat(bits[i * stride]);
    return;
  case DType::F16:
    for (int64_t i = 0; i < n; ++i)
      slot[i] = halfToFloat(bits[i * stride]);
    return;
  default:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      slot[i] = values[i * stride];
  }
}

/// Rounds fp32 values to `type` (and back): what storing them as `type`
/// and loading them again gives.
TRELLIS_VECTOR_CLONES void round(ElementType type, float *values,
                                 int64_t n) {
  if (type == ElementType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      values[i] = roundToBfloat16(values[i]);
  } else if (type == ElementType::F16) {
    for (int64_t i = 0; i < n; ++i)
      values[i] = halfToFloat(floatToHalf(values[i]));
  }
}

/// An input's element offsets for result elements: strides along the
/// result's dimensions (0 where the input is broadcast).
struct InputView {
  const Tensor *tensor;
  std::vector<int64_t> strides;
  bool whole; // same shape as the result: offset = index
};

InputView viewOf(const Tensor &tensor, const std::vector<int64_t> &shape) {
  InputView view{&tensor, std::vector<int64_t>(shape.size(), 0),
                 tensor.shape() == shape};
  std::vector<int64_t> own = rowMajorStrides(tensor.shape());
  size_t lead = shape.size() - tensor.shape().size();
  for (size_t d = 0; d < tensor.shape().size(); ++d)
    view.strides[lead + d] = tensor.shape()[d] == 1 ? 0 : own[d];
  return view;
}

/// slot[0, n) = the input at result elements first ... first + n - 1: in
/// runs along the result's innermost dimension, each run's offset from its
/// row's index over the outer dimensions.
void loadBlock(const InputView &view, const std::vector<int64_t> &shape,
               int64_t first, int64_t n, float *slot) {
  if (view.whole || shape.empty()) {
    loadRun(*view.tensor, view.whole ? first : 0, view.whole ? 1 : 0, n, slot);
    return;
  }
  size_t rank = shape.size();
  int64_t inner = shape[rank - 1], innerStride = view.strides[rank - 1];
  for (int64_t i = 0; i < n;) {
    int64_t row = (first + i) / inner, column = (first + i) % inner;
    int64_t count = std::min(inner - column, n - i);
    int64_t offset = column * innerStride;
    for (size_t d = rank - 1; d-- > 0;) {
      offset += (row % shape[d]) * view.strides[d];
      row /= shape[d];
    }
    loadRun(*view.tensor, offset, innerStride, count, slot + i);
    i += count;
  }
}

/// result[first, first + n) = values, rounded to the result's dtype
/// already (`round`), in that dtype.
TRELLIS_VECTOR_CLONES void storeBlock(const float *values, int64_t first,
                                      int64_t n, Tensor &result) {
  uint16_t *bits = static_cast<uint16_t *>(result.raw()) + first;
  switch (result.desc().dtype) {
  case DType::BF16:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      bits[i] = exactBfloat16(values[i]);
    return;
  case DType::F16:
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToHalf(values[i]);
    return;
  default:
    std::copy(values, values + n, result.f32() + first);
  }
}

/// out[i] = value(i) for i < n, rounded to bf16 where `bf16`: one pass,
/// each value rounded before it is stored.
template <typename Value>
inline void storeValues(bool bf16, float *__restrict out, int64_t n,
                        Value value) {
  if (bf16)
    for (int64_t i = 0; i < n; ++i)
      out[i] = roundToBfloat16(value(i));
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = value(i);
}

/// out = a op b (rounded to bf16 where `bf16`); `out` is another slot than
/// a and b.
TRELLIS_VECTOR_CLONES void binaryLoop(BinaryFunction op,
                                      const float *__restrict a,
                                      const float *__restrict b,
                                      float *__restrict out, int64_t n,
                                      bool bf16) {
  switch (op) {
#define TRELLIS_BINARY_CASE(NAME, TEXT, LINEAR, FUSIBLE)                       \
  case BinaryFunction::NAME:                                                   \
    storeValues(bf16, out, n, [&](int64_t i) {                                 \
      return applyBinary(BinaryFunction::NAME, a[i], b[i]);                    \
    });                                                                        \
    return;
    TRELLIS_BINARY_FUNCTIONS(TRELLIS_BINARY_CASE)
#undef TRELLIS_BINARY_CASE
  }
}

TRELLIS_VECTOR_CLONES void scaleLoop(const float *__restrict a, float factor,
                                     float *__restrict out, int64_t n,
                                     bool bf16) {
  storeValues(bf16, out, n, [&](int64_t i) { return a[i] * factor; });
}

/// out = the instruction's values, rounded to `type`.
void compute(const FusedInstruction &instruction, ElementType type,
             const std::vector<float *> &slots, float *out, int64_t n) {
  const float *a = slots[instruction.operands[0]];
  // Binary and scale loops round to bf16 as they store; the rest after.
  bool bf16 = type == ElementType::BF16, rounded = false;
  using Kind = FusedInstruction::Kind;
  switch (instruction.kind) {
  case Kind::Binary:
    binaryLoop(instruction.binary, a, slots[instruction.operands[1]], out, n,
               bf16);
    rounded = bf16;
    break;
  case Kind::Scale:
    scaleLoop(a, static_cast<float>(instruction.factor), out, n, bf16);
    rounded = bf16;
    break;
  case Kind::Unary:
    runUnaryFunction(instruction.unary, a, nullptr, out, n);
    break;
  case Kind::UnaryGrad:
    runUnaryFunction(instruction.unary, a, slots[instruction.operands[1]], out,
                     n);
    break;
  case Kind::Cast:
    std::copy(a, a + n, out);
    break;
  }
  if (!rounded)
    round(type, out, n);
}

/// Evaluates `program` over `inputs` (broadcast to the result's shape)
/// into `result`.
void evaluateFusedProgram(const FusedProgram &program,
                          const std::vector<const Tensor *> &inputs,
                          Tensor &result) {
  const std::vector<int64_t> &shape = result.shape();
  std::vector<InputView> views;
  for (const Tensor *input : inputs)
    views.push_back(viewOf(*input, shape));
  int64_t total = result.size();
  int64_t blocks = (total + kBlock - 1) / kBlock;
  size_t slotCount = program.slotTypes.size();
#pragma omp parallel if (blocks > 1)
  {
    std::vector<float> storage(slotCount * kBlock);
    std::vector<float *> slots(slotCount);
    for (size_t s = 0; s < slotCount; ++s)
      slots[s] = storage.data() + s * kBlock;
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      int64_t first = block * kBlock, n = std::min(kBlock, total - first);
      for (size_t i = 0; i < views.size(); ++i)
        loadBlock(views[i], shape, first, n, slots[i]);
      for (size_t k = 0; k < program.instructions.size(); ++k) {
        size_t slot = views.size() + k;
        compute(program.instructions[k], program.slotTypes[slot], slots,
                slots[slot], n);
      }
      storeBlock(slots[slotCount - 1], first, n, result);
    }
  }
}

/// The one-instruction program of a fusible elementwise row's instruction
/// (binary, scale, unary, unary_grad).
std::string programOf(const KernelArgs &args) {
  const std::string &op = args.instruction.op;
  switch (rowOf(args).family) {
  case OpFamily::Binary:
    return op + " %0 %1";
  case OpFamily::Scale: {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.17g",
                  parametersOf<ScaleParameters>(args).factor);
    return "scale %0 " + std::string(factor);
  }
  case OpFamily::UnaryGrad:
    return "unary_grad " +
           std::string(unaryFunctionName(
               parametersOf<UnaryGradParameters>(args).function)) +
           " %0 %1";
  default:
    return op + " %0";
  }
}

#undef TRELLIS_VECTOR_CLONES

/// Evaluates the instruction's program (prepared once, or parsed now)
/// into its result.
Status runProgram(const KernelArgs &args) {
  std::vector<const Tensor *> inputs;
  for (size_t i = 0; i < args.instruction.inputs.size(); ++i)
    inputs.push_back(&args.in(i));
  const auto *launch = static_cast<const CpuLaunch *>(args.prepared);
  if (launch && launch->program) {
    evaluateFusedProgram(*launch->program, inputs, args.out(0));
    return Status::success();
  }
  StatusOr<FusedProgram> program = parseProgramOf(args);
  if (!program.ok())
    return program.status();
  evaluateFusedProgram(*program, inputs, args.out(0));
  return Status::success();
}

} // namespace

StatusOr<FusedProgram> parseProgramOf(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  const OpContract &row = rowOf(args);
  std::vector<std::string> lines =
      row.family == OpFamily::FusedElementwise
          ? parametersOf<FusedElementwiseParameters>(args).program
          : std::vector<std::string>{programOf(args)};
  std::vector<ElementType> types;
  for (size_t i = 0; i < instruction.inputs.size(); ++i)
    types.push_back(elementOf(args.in(i).desc().dtype));
  FusedProgram program;
  if (Diagnostic diagnostic = parseFusedProgram(lines, types, program))
    return Status::error(instruction.op + ": " + *diagnostic);
  // storeBlock takes the last slot's values as the result's.
  if (program.resultType() != elementOf(args.out(0).desc().dtype))
    return Status::error(
        instruction.op + ": the program computes " +
        elementTypeName(program.resultType()) + " values but its result is " +
        dtypeName(args.out(0).desc().dtype));
  return program;
}

bool isNarrowElementwise(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  DType dtype = args.out(0).desc().dtype;
  if (dtype != DType::BF16 && dtype != DType::F16)
    return false;
  for (size_t i = 0; i < instruction.inputs.size(); ++i)
    if (args.in(i).desc().dtype != dtype)
      return false;
  return rowOf(args).fusible;
}

Status runNarrowElementwise(const KernelArgs &args) { return runProgram(args); }

Status runFusedElementwise(const KernelArgs &args) { return runProgram(args); }

void registerFusedElementwiseKernels(KernelTable &table) {
  table.addFamily(OpFamily::FusedElementwise, runFusedElementwise);
}

} // namespace trellis::runtime::cpu
