//===- FusedElementwiseKernels.cpp - fused_elementwise compiled by NVRTC --===//
//
// When the plan loads (the kernel table's prepare), each fused_elementwise
// instruction's program is parsed (trellis/Common/FusedProgram.h), written
// as one CUDA kernel (FusedElementwiseSource.h says what it computes),
// compiled by NVRTC for the current device's compute capability to CUBIN
// and loaded with the CUDA runtime's library API (cudaLibraryLoadData: the
// runtime is linked statically and libcuda never is). Kernels are cached
// for the process by their source and architecture, so instructions with
// one program, dtypes and broadcast layout compile once; they are never
// unloaded. A plan with fused programs needs NVRTC; without it the prepare
// fails, naming `trellis compile --fuse=false`.
//
//===----------------------------------------------------------------------===//

#include "CudaLibraries.h"
#include "CudaSupport.h"
#include "FusedElementwiseSource.h"
#include "LaunchGeometry.h"

#include "trellis/Runtime/OpShapes.h"

#include <nvrtc.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace trellis::runtime::cuda {

namespace {

// trellis/Common/UnaryFunctions.h, BinaryFunctions.h and HostDevice.h as
// text, embedded by
// runtime/CMakeLists.txt: {"trellis/Common/...", R"(...)"},
const SourceHeader kEmbeddedHeaders[] = {
#include "FusedElementwiseHeaders.inc"
    {"math.h", ""},
};

/// What every kernel's source starts with: 16-bit floats as bits, widened
/// exactly and narrowed to nearest even with the instructions cuda_bf16.h
/// and cuda_fp16.h use on sm_80 and newer (whose headers NVRTC may not
/// find on the machine).
constexpr const char *kPrelude =
    R"cuda(#include "trellis/Common/BinaryFunctions.h"
#include "trellis/Common/UnaryFunctions.h"

typedef long long i64;

__device__ __forceinline__ float widenBf16(unsigned short bits) {
  return __uint_as_float((unsigned)bits << 16);
}
__device__ __forceinline__ float widenF16(unsigned short bits) {
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}
__device__ __forceinline__ unsigned short narrowBf16(float value) {
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}
__device__ __forceinline__ unsigned short narrowF16(float value) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}
__device__ __forceinline__ float roundBf16(float value) {
  return widenBf16(narrowBf16(value));
}
__device__ __forceinline__ float roundF16(float value) {
  return widenF16(narrowF16(value));
}
// The value as if stored and loaded again: no multiply-add spans it.
__device__ __forceinline__ float asLoaded(float value) {
  volatile float stored = value;
  return stored;
}
)cuda";

std::string slot(int index) { return "s" + std::to_string(index); }

/// The instruction as the plan spells it ("unary_grad silu %0 %4").
std::string spelling(const FusedInstruction &instruction) {
  std::string text = instruction.op;
  if (instruction.kind == FusedInstruction::Kind::UnaryGrad)
    text += " " + instruction.function;
  if (instruction.kind == FusedInstruction::Kind::Cast)
    text += std::string(" ") + elementTypeName(instruction.type);
  for (int operand : instruction.operands)
    text += " %" + std::to_string(operand);
  if (instruction.kind == FusedInstruction::Kind::Scale) {
    char factor[32];
    std::snprintf(factor, sizeof factor, " %.17g", instruction.factor);
    text += factor;
  }
  return text;
}

/// "trellis::UnaryFunction::GeluTanh" for gelu_tanh.
std::string unaryFunction(UnaryFunction function) {
  return std::string("trellis::UnaryFunction::") +
         unaryFunctionEnumerator(function);
}

/// The fp32 value of instruction `instruction`, before its rounding.
/// `contracted[s]`: slot s is an fp32 result of code NVRTC may contract
/// (a unary function), which a unary function must read asLoaded.
std::string valueOf(const FusedInstruction &instruction,
                    const std::vector<bool> &contracted) {
  const std::vector<int> &operands = instruction.operands;
  std::string a = slot(operands[0]);
  std::string b = operands.size() > 1 ? slot(operands[1]) : "";
  std::string argument = contracted[operands[0]] ? "asLoaded(" + a + ")" : a;
  using Kind = FusedInstruction::Kind;
  switch (instruction.kind) {
  case Kind::Binary:
    // The shared formula (BinaryFunctions.h), its arithmetic through the
    // round-to-nearest intrinsics, which NVRTC never contracts into an
    // FMA: each member rounds as it would unfused.
    return std::string("trellis::applyBinary(trellis::BinaryFunction::") +
           binaryFunctionEnumerator(instruction.binary) + ", " + a + ", " + b +
           ")";
  case Kind::Scale: {
    // The unfused scale's fp32 factor, bit for bit.
    float factor = static_cast<float>(instruction.factor);
    uint32_t bits;
    std::memcpy(&bits, &factor, sizeof bits);
    char literal[24];
    std::snprintf(literal, sizeof literal, "0x%08xu", bits);
    return "__fmul_rn(" + a + ", __uint_as_float(" + literal + "))";
  }
  case Kind::Unary:
    return "trellis::applyUnary(" + unaryFunction(instruction.unary) + ", " +
           argument + ")";
  case Kind::UnaryGrad:
    return "__fmul_rn(trellis::unaryDerivative(" +
           unaryFunction(instruction.unary) + ", " + argument + "), " + b +
           ")";
  case Kind::Cast:
    return a;
  }
  return a;
}

std::string rounded(ElementType type, const std::string &value) {
  if (type == ElementType::BF16)
    return "roundBf16(" + value + ")";
  if (type == ElementType::F16)
    return "roundF16(" + value + ")";
  return value;
}

std::string loadOf(ElementType type, int input, const std::string &offset) {
  std::string element = "[" + offset + "]";
  std::string pointer = "a.in[" + std::to_string(input) + "]";
  if (type == ElementType::F32)
    return "((const float *)" + pointer + ")" + element;
  return std::string(type == ElementType::BF16 ? "widenBf16" : "widenF16") +
         "(((const unsigned short *)" + pointer + ")" + element + ")";
}

std::string storeOf(ElementType type, const std::string &value) {
  if (type == ElementType::F32)
    return "((float *)a.out)[i] = " + value + ";";
  return std::string("((unsigned short *)a.out)[i] = ") +
         (type == ElementType::BF16 ? "narrowBf16(" : "narrowF16(") + value +
         ");";
}

bool broadcasts(const FusedKernelLayout &layout) {
  for (FusedInputAccess access : layout.inputs)
    if (access == FusedInputAccess::Broadcast)
      return true;
  return false;
}

/// The kernel's parameter as FusedElementwiseSource.h lays it out.
std::vector<int64_t> kernelArguments(const KernelArgs &args,
                                     const FusedKernelLayout &layout) {
  std::vector<int64_t> words;
  auto address = [](const void *pointer) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(pointer));
  };
  size_t inputs = args.instruction.inputs.size();
  for (size_t i = 0; i < inputs; ++i)
    words.push_back(address(args.in(i).raw()));
  const Tensor &out = args.out(0);
  words.push_back(address(out.raw()));
  words.push_back(out.size());
  if (!broadcasts(layout))
    return words;
  words.insert(words.end(), out.shape().begin(), out.shape().end());
  for (size_t i = 0; i < inputs; ++i)
    if (layout.inputs[i] == FusedInputAccess::Broadcast) {
      std::vector<int64_t> strides =
          broadcastStrides(args.in(i).shape(), out.shape().size());
      words.insert(words.end(), strides.begin(), strides.end());
    }
  return words;
}

/// NVRTC's entry points, opened once per process.
struct Nvrtc {
  SharedLibrary library;
  decltype(&::nvrtcGetErrorString) getErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) createProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) destroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) compileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) getProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) getProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) getCubinSize = nullptr;
  decltype(&::nvrtcGetCUBIN) getCubin = nullptr;
};

StatusOr<std::unique_ptr<Nvrtc>> loadNvrtc() {
  StatusOr<SharedLibrary> library = SharedLibrary::open(nvrtcLibrary());
  if (!library.ok())
    return library.status();
  auto nvrtc = std::make_unique<Nvrtc>();
  nvrtc->library = std::move(*library);
  const SharedLibrary &from = nvrtc->library;
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcGetErrorString", nvrtc->getErrorString));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcCreateProgram", nvrtc->createProgram));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcDestroyProgram", nvrtc->destroyProgram));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcCompileProgram", nvrtc->compileProgram));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcGetProgramLogSize", nvrtc->getProgramLogSize));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcGetProgramLog", nvrtc->getProgramLog));
  TRELLIS_RETURN_IF_ERROR(
      loadSymbol(from, "nvrtcGetCUBINSize", nvrtc->getCubinSize));
  TRELLIS_RETURN_IF_ERROR(loadSymbol(from, "nvrtcGetCUBIN", nvrtc->getCubin));
  return nvrtc;
}

StatusOr<const Nvrtc *> openNvrtc() {
  static const StatusOr<std::unique_ptr<Nvrtc>> loaded = loadNvrtc();
  if (!loaded.ok())
    return loaded.status().withContext(
        "cuda: a fused plan needs NVRTC to compile its fused_elementwise "
        "kernels (`trellis compile --fuse=false` makes a plan without "
        "them)");
  return static_cast<const Nvrtc *>(loaded->get());
}

/// The current device's compute capability as sm_XY's XY.
StatusOr<int> deviceArchitecture() {
  int device = 0, major = 0, minor = 0;
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "finding the device");
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
      "querying the compute capability");
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
      "querying the compute capability");
  return major * 10 + minor;
}

/// The kernel of `source` for sm_`arch`, compiled and loaded on first use.
StatusOr<cudaKernel_t> loadedKernel(const std::string &source, int arch) {
  static std::mutex mutex;
  static std::unordered_map<std::string, cudaKernel_t> kernels;
  std::string key = "sm_" + std::to_string(arch) + "\n" + source;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = kernels.find(key); found != kernels.end())
    return found->second;
  StatusOr<std::string> cubin = compileFusedSource(source, arch);
  if (!cubin.ok())
    return cubin.status();
  cudaLibrary_t library = nullptr;
  TRELLIS_CUDA_RETURN_IF_ERROR(cudaLibraryLoadData(&library, cubin->data(),
                                                   nullptr, nullptr, 0, nullptr,
                                                   nullptr, 0),
                               "loading a fused_elementwise kernel");
  cudaKernel_t kernel = nullptr;
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaLibraryGetKernel(&kernel, library, kFusedKernelName),
      "finding the fused_elementwise kernel");
  kernels.emplace(std::move(key), kernel);
  return kernel;
}

/// The instruction's program over its inputs' dtypes, checked against its
/// result's dtype (the CPU kernel's words).
StatusOr<FusedProgram> parseProgramOf(const KernelArgs &args) {
  const Instruction &instruction = args.instruction;
  std::vector<ElementType> types;
  for (size_t i = 0; i < instruction.inputs.size(); ++i)
    types.push_back(args.in(i).desc().dtype);
  FusedProgram program;
  if (Diagnostic diagnostic = parseFusedProgram(
          parametersOf<FusedElementwiseParameters>(args).program, types,
          program))
    return Status::error(instruction.op + ": " + *diagnostic);
  if (program.resultType() != args.out(0).desc().dtype)
    return Status::error(instruction.op + ": the program computes " +
                         elementTypeName(program.resultType()) +
                         " values but its result is " +
                         dtypeName(args.out(0).desc().dtype));
  return program;
}

FusedKernelLayout layoutOf(const KernelArgs &args) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < args.instruction.inputs.size(); ++i)
    shapes.push_back(args.in(i).shape());
  return fusedKernelLayout(shapes, args.out(0).shape());
}

/// The kernel of an instruction, and the layout it was compiled for.
class PreparedFusedKernel : public PreparedLaunch {
public:
  FusedKernelLayout layout;
  cudaKernel_t kernel = nullptr;
};

StatusOr<std::unique_ptr<PreparedLaunch>> prepareFused(const KernelArgs &args,
                                                       CudaContext &) {
  StatusOr<FusedProgram> program = parseProgramOf(args);
  if (!program.ok())
    return program.status();
  auto prepared = std::make_unique<PreparedFusedKernel>();
  prepared->layout = layoutOf(args);
  StatusOr<int> arch = deviceArchitecture();
  if (!arch.ok())
    return arch.status();
  StatusOr<cudaKernel_t> kernel =
      loadedKernel(fusedElementwiseSource(*program, prepared->layout), *arch);
  if (!kernel.ok())
    return kernel.status();
  prepared->kernel = *kernel;
  return std::unique_ptr<PreparedLaunch>(std::move(prepared));
}

Status runFused(const KernelArgs &args, CudaContext &context) {
  // Prepared when the plan loaded; a launch without (a test), or with
  // other shapes than those prepared for, prepares now (from the cache).
  std::unique_ptr<PreparedLaunch> now;
  const auto *prepared =
      dynamic_cast<const PreparedFusedKernel *>(args.prepared);
  FusedKernelLayout layout = layoutOf(args);
  if (!prepared || !(prepared->layout == layout)) {
    StatusOr<std::unique_ptr<PreparedLaunch>> made =
        prepareFused(args, context);
    if (!made.ok())
      return made.status();
    now = std::move(*made);
    prepared = static_cast<const PreparedFusedKernel *>(now.get());
  }
  std::vector<int64_t> words = kernelArguments(args, layout);
  // Volta and newer take 32764 bytes of parameters; 4 KiB anywhere.
  if (words.size() * sizeof(int64_t) > 4096)
    return Status::error(
        "cuda: fused_elementwise's kernel parameter takes " +
        std::to_string(words.size() * sizeof(int64_t)) +
        " bytes (its inputs' pointers and strides), expected at most 4096");
  LaunchGeometry grid = elementwiseGeometry(args.out(0).size());
  void *parameters[] = {words.data()};
  TRELLIS_CUDA_RETURN_IF_ERROR(
      cudaLaunchKernel(reinterpret_cast<const void *>(prepared->kernel),
                       dim3(static_cast<unsigned>(grid.blocks)),
                       dim3(static_cast<unsigned>(grid.threads)), parameters, 0,
                       context.stream),
      "launching fused_elementwise");
  return Status::success();
}

} // namespace

FusedKernelLayout
fusedKernelLayout(const std::vector<std::vector<int64_t>> &inputShapes,
                  const std::vector<int64_t> &resultShape) {
  FusedKernelLayout layout;
  layout.rank = static_cast<int>(resultShape.size());
  for (const std::vector<int64_t> &shape : inputShapes) {
    int64_t elements = 1;
    for (int64_t size : shape)
      elements *= size;
    layout.inputs.push_back(shape == resultShape ? FusedInputAccess::Whole
                            : elements == 1      ? FusedInputAccess::Single
                                                 : FusedInputAccess::Broadcast);
  }
  return layout;
}

std::string fusedElementwiseSource(const FusedProgram &program,
                                   const FusedKernelLayout &layout) {
  size_t inputs = layout.inputs.size();
  std::string rank = std::to_string(layout.rank);
  std::string source = kPrelude;
  source += "\nstruct Arguments {\n  const void *in[" + std::to_string(inputs) +
            "];\n  void *out;\n  i64 count;\n";
  if (broadcasts(layout)) {
    source += "  i64 shape[" + rank + "];\n";
    for (size_t i = 0; i < inputs; ++i)
      if (layout.inputs[i] == FusedInputAccess::Broadcast)
        source += "  i64 strides" + std::to_string(i) + "[" + rank + "];\n";
  }
  source += "};\n\nextern \"C\" __global__ void " +
            std::string(kFusedKernelName) +
            "(const Arguments a) {\n"
            "  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x;\n"
            "       i < a.count; i += i64(gridDim.x) * blockDim.x) {\n";
  if (broadcasts(layout)) {
    std::string offsets, steps;
    for (size_t i = 0; i < inputs; ++i)
      if (layout.inputs[i] == FusedInputAccess::Broadcast) {
        std::string offset = "o" + std::to_string(i);
        offsets += "    i64 " + offset + " = 0;\n";
        steps += "      " + offset + " += index * a.strides" +
                 std::to_string(i) + "[d];\n";
      }
    source += offsets +
              "    i64 rest = i;\n#pragma unroll\n"
              "    for (int d = " +
              std::to_string(layout.rank - 1) +
              "; d >= 0; --d) {\n"
              "      const i64 index = rest % a.shape[d];\n"
              "      rest /= a.shape[d];\n" +
              steps + "    }\n";
  }
  for (size_t i = 0; i < inputs; ++i) {
    std::string offset = layout.inputs[i] == FusedInputAccess::Whole ? "i"
                         : layout.inputs[i] == FusedInputAccess::Single
                             ? "0"
                             : "o" + std::to_string(i);
    source += "    const float " + slot(static_cast<int>(i)) + " = " +
              loadOf(program.slotTypes[i], static_cast<int>(i), offset) +
              "; // " + elementTypeName(program.slotTypes[i]) + " input\n";
  }
  std::vector<bool> contracted(program.slotTypes.size(), false);
  for (size_t k = 0; k < program.instructions.size(); ++k) {
    const FusedInstruction &instruction = program.instructions[k];
    int index = static_cast<int>(inputs + k);
    ElementType type = program.slotTypes[index];
    bool fp32 = type == ElementType::F32;
    using Kind = FusedInstruction::Kind;
    contracted[index] = fp32 && (instruction.kind == Kind::Unary ||
                                 (instruction.kind == Kind::Cast &&
                                  contracted[instruction.operands[0]]));
    source += "    // " + slot(index) + " = " + spelling(instruction) + " (" +
              elementTypeName(type) + ")\n    const float " + slot(index) +
              " = " + rounded(type, valueOf(instruction, contracted)) + ";\n";
  }
  int last = static_cast<int>(program.slotTypes.size()) - 1;
  source += "    " + storeOf(program.resultType(), slot(last)) + "\n  }\n}\n";
  return source;
}

const std::vector<SourceHeader> &fusedElementwiseHeaders() {
  static const std::vector<SourceHeader> headers(std::begin(kEmbeddedHeaders),
                                                 std::end(kEmbeddedHeaders));
  return headers;
}

StatusOr<std::string> compileFusedSource(const std::string &source, int arch) {
  StatusOr<const Nvrtc *> opened = openNvrtc();
  if (!opened.ok())
    return opened.status();
  const Nvrtc &nvrtc = **opened;
  auto failure = [&](const std::string &what, nvrtcResult result) {
    return Status::error("cuda: NVRTC " + what +
                         " failed: " + nvrtc.getErrorString(result));
  };
  std::vector<const char *> names, texts;
  for (const SourceHeader &header : fusedElementwiseHeaders()) {
    names.push_back(header.name);
    texts.push_back(header.text);
  }
  nvrtcProgram program = nullptr;
  if (nvrtcResult result = nvrtc.createProgram(
          &program, source.c_str(), "fused_elementwise.cu",
          static_cast<int>(names.size()), texts.data(), names.data());
      result != NVRTC_SUCCESS)
    return failure("creating a program", result);
  struct Destroy {
    const Nvrtc &nvrtc;
    nvrtcProgram &program;
    ~Destroy() { nvrtc.destroyProgram(&program); }
  } destroy{nvrtc, program};
  // nvcc's defaults, which the unfused kernels are compiled with; the
  // shared header's unannotated functions compile as device code.
  std::string architecture = "--gpu-architecture=sm_" + std::to_string(arch);
  const char *options[] = {architecture.c_str(),
                           "--std=c++17",
                           "--fmad=true",
                           "--prec-div=true",
                           "--prec-sqrt=true",
                           "--ftz=false",
                           "--device-as-default-execution-space"};
  nvrtcResult compiled = nvrtc.compileProgram(
      program, static_cast<int>(std::size(options)), options);
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtc.getProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      if (nvrtc.getProgramLog(program, log.data()) != NVRTC_SUCCESS)
        log.clear();
      log.resize(std::strlen(log.c_str()));
    }
    return Status::error("cuda: NVRTC could not compile a fused_elementwise "
                         "kernel for sm_" +
                         std::to_string(arch) + " (" +
                         nvrtc.getErrorString(compiled) + "):\n" + log);
  }
  size_t size = 0;
  if (nvrtcResult result = nvrtc.getCubinSize(program, &size);
      result != NVRTC_SUCCESS)
    return failure("sizing the CUBIN", result);
  std::string cubin(size, '\0');
  if (nvrtcResult result = nvrtc.getCubin(program, cubin.data());
      result != NVRTC_SUCCESS)
    return failure("getting the CUBIN", result);
  return cubin;
}

void registerFusedElementwiseKernels(CudaKernelTable &table) {
  table.addFamily(OpFamily::FusedElementwise, {runFused, prepareFused});
}

} // namespace trellis::runtime::cuda
