//===- FusedElementwise.cpp - One pass over a fused elementwise program ---===//
//
// The result is cut into blocks of kBlock elements, spread over the
// device's OpenMP threads; per block, each input is loaded (broadcast, and
// widened from 16 bits) into a slot of fp32 values, each instruction
// computes its slot from earlier ones in one vectorizable loop (unary
// functions through the same oneDNN eltwise the unfused ops use) and
// rounds it to its dtype, and the last slot is stored. Every element gets
// exactly the value the unfused ops would give it, whatever the blocks.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include "trellis/Common/FusedProgram.h"
#include "trellis/Common/HalfFloat.h"

#include <algorithm>

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

float load(const Tensor &tensor, int64_t i) {
  switch (tensor.desc().dtype) {
  case DType::BF16:
    return bfloat16ToFloat(static_cast<const uint16_t *>(tensor.raw())[i]);
  case DType::F16:
    return halfToFloat(static_cast<const uint16_t *>(tensor.raw())[i]);
  default:
    return tensor.f32()[i];
  }
}

/// Rounds fp32 values to `type` (and back): what storing them as `type`
/// and loading them again gives.
void round(ElementType type, float *values, int64_t n) {
  if (type == ElementType::BF16)
    for (int64_t i = 0; i < n; ++i)
      values[i] = bfloat16ToFloat(floatToBfloat16(values[i]));
  else if (type == ElementType::F16)
    for (int64_t i = 0; i < n; ++i)
      values[i] = halfToFloat(floatToHalf(values[i]));
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
  std::vector<int64_t> own = stridesOf(tensor.shape());
  size_t lead = shape.size() - tensor.shape().size();
  for (size_t d = 0; d < tensor.shape().size(); ++d)
    view.strides[lead + d] = tensor.shape()[d] == 1 ? 0 : own[d];
  return view;
}

/// slot[0, n) = the input at result elements first ... first + n - 1.
void loadBlock(const InputView &view, const std::vector<int64_t> &shape,
               int64_t first, int64_t n, float *slot) {
  if (view.whole) {
    for (int64_t i = 0; i < n; ++i)
      slot[i] = load(*view.tensor, first + i);
    return;
  }
  // The odometer of result dimensions at `first`.
  size_t rank = shape.size();
  std::vector<int64_t> index(rank, 0);
  int64_t rest = first, offset = 0;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % shape[d];
    rest /= shape[d];
    offset += index[d] * view.strides[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    slot[i] = load(*view.tensor, offset);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += view.strides[d];
      if (index[d] < shape[d])
        break;
      offset -= view.strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

void compute(const FusedInstruction &instruction,
             const std::vector<float *> &slots, float *out, int64_t n) {
  const float *a = slots[instruction.operands[0]];
  using Kind = FusedInstruction::Kind;
  switch (instruction.kind) {
  case Kind::Binary: {
    const float *b = slots[instruction.operands[1]];
    const std::string &op = instruction.op;
    if (op == "add")
      for (int64_t i = 0; i < n; ++i)
        out[i] = a[i] + b[i];
    else if (op == "sub")
      for (int64_t i = 0; i < n; ++i)
        out[i] = a[i] - b[i];
    else if (op == "mul")
      for (int64_t i = 0; i < n; ++i)
        out[i] = a[i] * b[i];
    else if (op == "div")
      for (int64_t i = 0; i < n; ++i)
        out[i] = a[i] / b[i];
    else
      for (int64_t i = 0; i < n; ++i)
        out[i] = a[i] >= b[i] ? a[i] : b[i];
    return;
  }
  case Kind::Scale: {
    float factor = static_cast<float>(instruction.factor);
    for (int64_t i = 0; i < n; ++i)
      out[i] = a[i] * factor;
    return;
  }
  case Kind::Unary:
    runUnaryFunction(instruction.op, a, nullptr, out, n);
    return;
  case Kind::UnaryGrad:
    runUnaryFunction(instruction.function, a, slots[instruction.operands[1]],
                     out, n);
    return;
  case Kind::Cast:
    std::copy(a, a + n, out);
    return;
  }
}

} // namespace

Status runFusedElementwise(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  std::vector<ElementType> types;
  for (size_t i = 0; i < instruction.inputs.size(); ++i)
    types.push_back(elementOf(args.in(i).desc().dtype));
  FusedProgram program;
  if (Diagnostic diagnostic =
          parseFusedProgram(instruction.texts("program"), types, program))
    return Status::error("fused_elementwise: " + *diagnostic);
  Tensor &result = args.out(0);
  const std::vector<int64_t> &shape = result.shape();
  std::vector<InputView> views;
  for (size_t i = 0; i < instruction.inputs.size(); ++i)
    views.push_back(viewOf(args.in(i), shape));
  int64_t total = result.size();
  int64_t blocks = (total + kBlock - 1) / kBlock;
  size_t slotCount = program.slotTypes.size();
#pragma omp parallel
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
        compute(program.instructions[k], slots, slots[slot], n);
        round(program.slotTypes[slot], slots[slot], n);
      }
      const float *last = slots[slotCount - 1];
      switch (result.desc().dtype) {
      case DType::BF16:
        for (int64_t i = 0; i < n; ++i)
          static_cast<uint16_t *>(result.raw())[first + i] =
              floatToBfloat16(last[i]);
        break;
      case DType::F16:
        for (int64_t i = 0; i < n; ++i)
          static_cast<uint16_t *>(result.raw())[first + i] =
              floatToHalf(last[i]);
        break;
      default:
        std::copy(last, last + n, result.f32() + first);
      }
    }
  }
  return Status::success();
}

} // namespace trellis::runtime::cpu
