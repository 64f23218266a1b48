//===- Cast.cpp - Float conversions and 16-bit operands -------------------===//
//
// `cast` converts between f32, bf16 and f16 (to 16 bits rounds to nearest
// even). Every other kernel is written over f32: an instruction with bf16
// or f16 operands runs it on fp32 copies of them, and its 16-bit results
// are rounded back, so each op computes and accumulates in fp32 and stores
// in its dtype.
//
//===----------------------------------------------------------------------===//

#include "FloatRows.h"
#include "Kernels.h"

#include "trellis/Common/HalfFloat.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace trellis::runtime::cpu {

/// The conversion loops, cloned for AVX-512 (picked at load time where the
/// CPU has it; the default build targets SSE2) and called per chunk.
#define TRELLIS_VECTOR_CLONES                                                  \
  __attribute__((target_clones("avx512f", "default")))

TRELLIS_VECTOR_CLONES void widenValues(DType dtype, const uint16_t *bits,
                                       float *target, int64_t n) {
  if (dtype == DType::BF16)
    for (int64_t i = 0; i < n; ++i)
      target[i] = bfloat16ToFloat(bits[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      target[i] = halfToFloat(bits[i]);
}

TRELLIS_VECTOR_CLONES void narrowValues(DType dtype, const float *source,
                                        uint16_t *bits, int64_t n) {
  if (dtype == DType::BF16)
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToBfloat16(source[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToHalf(source[i]);
}

#undef TRELLIS_VECTOR_CLONES

namespace {

/// Elements per chunk of the threaded conversions.
constexpr int64_t kConversionChunk = 1 << 14;

/// fn(first, count) over [0, n) in chunks, split over the threads from
/// kParallelElements elements.
template <typename Fn> void forChunks(int64_t n, Fn fn) {
  int64_t chunks = (n + kConversionChunk - 1) / kConversionChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t first = c * kConversionChunk;
    fn(first, std::min(kConversionChunk, n - first));
  }
}

void toFloat(const Tensor &source, float *target) {
  int64_t n = source.size();
  const uint16_t *bits = static_cast<const uint16_t *>(source.raw());
  DType dtype = source.desc().dtype;
  switch (dtype) {
  case DType::F32:
    std::memcpy(target, source.raw(), n * sizeof(float));
    return;
  case DType::BF16:
  case DType::F16:
    forChunks(n, [&](int64_t first, int64_t count) {
      widenValues(dtype, bits + first, target + first, count);
    });
    return;
  case DType::I32:
    return;
  }
}

void fromFloat(const float *source, Tensor &target) {
  int64_t n = target.size();
  uint16_t *bits = static_cast<uint16_t *>(target.raw());
  DType dtype = target.desc().dtype;
  switch (dtype) {
  case DType::F32:
    std::memcpy(target.raw(), source, n * sizeof(float));
    return;
  case DType::BF16:
  case DType::F16:
    forChunks(n, [&](int64_t first, int64_t count) {
      narrowValues(dtype, source + first, bits + first, count);
    });
    return;
  case DType::I32:
    return;
  }
}

/// fp32 scratch space for the 16-bit operands of one instruction at a
/// time, kept across calls: fresh allocations of large copies would fault
/// in new pages on every instruction of every step.
class Scratch {
public:
  /// Buffer `index` (of this instruction's copies), at least `count` floats.
  float *get(size_t index, int64_t count) {
    if (index >= buffers_.size())
      buffers_.resize(index + 1);
    Buffer &buffer = buffers_[index];
    if (buffer.capacity < count) {
      buffer.data.reset(new float[count]);
      buffer.capacity = count;
    }
    return buffer.data.get();
  }

private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t capacity = 0;
  };
  std::vector<Buffer> buffers_;
};

/// One per thread: kernels run on the compute thread, collectives on the
/// communication thread.
Scratch &scratch() {
  thread_local Scratch instance;
  return instance;
}

bool isNarrow(const Tensor &tensor) {
  return isNarrowDType(tensor.desc().dtype);
}

} // namespace

Status runCast(const KernelArgs &args) {
  const Tensor &in = args.in(0);
  Tensor &out = args.out(0);
  if (in.desc().dtype == out.desc().dtype) {
    std::memcpy(out.raw(), in.raw(), in.bytes());
    return Status::success();
  }
  if (in.desc().dtype == DType::F32) {
    fromFloat(in.f32(), out);
    return Status::success();
  }
  if (out.desc().dtype == DType::F32) {
    toFloat(in, out.f32());
    return Status::success();
  }
  float *wide = scratch().get(0, in.size());
  toFloat(in, wide);
  fromFloat(wide, out);
  return Status::success();
}

bool hasNarrowOperands(const KernelArgs &args) {
  for (int64_t id : args.instruction.inputs)
    if (isNarrow(args.buffers[id]))
      return true;
  for (int64_t id : args.instruction.outputs)
    if (isNarrow(args.buffers[id]))
      return true;
  return false;
}

Status runInFloat(const KernelArgs &args, Kernel kernel) {
  // A buffer table of this instruction alone: its operands, the 16-bit
  // ones replaced by fp32 copies. Results are widened too only for
  // `accumulate`, the one kernel that reads its result (total += value);
  // every other kernel overwrites its results whole.
  const Instruction &original = args.instruction;
  Instruction local;
  local.op = original.op;
  local.attrs = original.attrs;
  local.contract = original.contract;
  local.parameters = original.parameters;
  std::vector<Tensor> buffers;
  size_t copies = 0;
  bool readsResults = original.row().effects.accumulates;
  auto bind = [&](int64_t id, bool read) -> int64_t {
    const Tensor &tensor = args.buffers[id];
    if (!isNarrow(tensor)) {
      buffers.push_back(tensor);
    } else {
      float *copy =
          scratch().get(copies++, std::max<int64_t>(tensor.size(), 1));
      if (read)
        toFloat(tensor, copy);
      BufferDesc desc = tensor.desc();
      desc.dtype = DType::F32;
      buffers.emplace_back(desc, copy);
    }
    return static_cast<int64_t>(buffers.size()) - 1;
  };
  for (int64_t id : original.inputs)
    local.inputs.push_back(bind(id, true));
  for (int64_t id : original.outputs)
    local.outputs.push_back(bind(id, readsResults));
  TRELLIS_RETURN_IF_ERROR(
      kernel(KernelArgs{local, buffers, args.axes, args.comm, args.prepared}));
  for (size_t i = 0; i < original.outputs.size(); ++i) {
    Tensor &target = args.buffers[original.outputs[i]];
    if (isNarrow(target))
      fromFloat(buffers[local.outputs[i]].f32(), target);
  }
  return Status::success();
}

void registerCastKernels(KernelTable &table) {
  table.addFamily(OpFamily::Cast, runCast);
}

} // namespace trellis::runtime::cpu
