//===- FusedElementwiseSourceTest.cpp - fused_elementwise's CUDA source ---===//
//
// What a CPU can check of the NVRTC kernels: the generated source names
// every instruction, reads inputs as broadcast, rounds 16-bit slots after
// each instruction and keeps the program's arithmetic uncontracted; and,
// where NVRTC opens (it needs no GPU), that the source compiles to CUBIN
// for sm_90.
//
//===----------------------------------------------------------------------===//

#include "../../cuda/FusedElementwiseSource.h"
#include "../../cuda/CudaLibraries.h"

#include <gtest/gtest.h>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::cuda;

namespace {

FusedProgram parsed(const std::vector<std::string> &lines,
                    const std::vector<ElementType> &inputs) {
  FusedProgram program;
  Diagnostic diagnostic = parseFusedProgram(lines, inputs, program);
  EXPECT_FALSE(diagnostic) << *diagnostic;
  return program;
}

/// The bf16 chain of FusedElementwiseTest: x + y in bf16, a bias added in
/// f32, back to bf16, GELU.
const std::vector<std::string> kBf16Chain{
    "add %0 %1", "cast f32 %3", "add %4 %2", "cast bf16 %5", "gelu_tanh %6"};

std::string bf16ChainSource() {
  FusedProgram program = parsed(
      kBf16Chain, {ElementType::BF16, ElementType::BF16, ElementType::F32});
  return fusedElementwiseSource(
      program,
      fusedKernelLayout({{3, 1000, 8}, {3, 1000, 8}, {8}}, {3, 1000, 8}));
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(FusedElementwiseSourceTest, LayoutsTellWholeSingleAndBroadcastInputs) {
  FusedKernelLayout layout = fusedKernelLayout(
      {{3, 1, 8}, {1000, 1}, {1}, {3, 1000, 8}, {}}, {3, 1000, 8});
  EXPECT_EQ(layout.rank, 3);
  EXPECT_EQ(layout.inputs,
            (std::vector<FusedInputAccess>{
                FusedInputAccess::Broadcast, FusedInputAccess::Broadcast,
                FusedInputAccess::Single, FusedInputAccess::Whole,
                FusedInputAccess::Single}));
}

TEST(FusedElementwiseSourceTest, NamesEveryInstructionAndRoundsItsSlot) {
  std::string source = bf16ChainSource();
  EXPECT_TRUE(contains(source, "#include \"trellis/Common/UnaryFunctions.h\""));
  EXPECT_TRUE(
      contains(source, "#include \"trellis/Common/BinaryFunctions.h\""));
  EXPECT_TRUE(contains(source, std::string("extern \"C\" __global__ void ") +
                                   kFusedKernelName));
  // Inputs: bf16 widened at the element's index, the bias through its
  // strides.
  EXPECT_TRUE(contains(
      source,
      "const float s0 = widenBf16(((const unsigned short *)a.in[0])[i]);"));
  EXPECT_TRUE(
      contains(source, "const float s2 = ((const float *)a.in[2])[o2];"));
  EXPECT_TRUE(contains(source, "o2 += index * a.strides2[d];"));
  EXPECT_FALSE(contains(source, "a.strides0"));
  // Each instruction, rounded to its slot's dtype.
  EXPECT_TRUE(contains(source, "// s3 = add %0 %1 (bf16)\n"
                               "    const float s3 = roundBf16(trellis::"
                               "applyBinary(trellis::BinaryFunction::Add, s0, "
                               "s1));"));
  EXPECT_TRUE(contains(source, "// s4 = cast f32 %3 (f32)\n"
                               "    const float s4 = s3;"));
  EXPECT_TRUE(contains(source, "// s5 = add %4 %2 (f32)\n"
                               "    const float s5 = trellis::applyBinary("
                               "trellis::BinaryFunction::Add, s4, s2);"));
  EXPECT_TRUE(contains(source, "// s6 = cast bf16 %5 (bf16)\n"
                               "    const float s6 = roundBf16(s5);"));
  EXPECT_TRUE(contains(source,
                       "// s7 = gelu_tanh %6 (bf16)\n"
                       "    const float s7 = roundBf16(trellis::applyUnary("
                       "trellis::UnaryFunction::GeluTanh, s6));"));
  EXPECT_TRUE(
      contains(source, "((unsigned short *)a.out)[i] = narrowBf16(s7);"));
}

TEST(FusedElementwiseSourceTest, KeepsNeighbouringInstructionsApart) {
  // An fp32 unary result read by another unary function is read as if
  // loaded from memory; the scale's factor is the fp32 one, bit for bit.
  FusedProgram program =
      parsed({"silu %0", "gelu_tanh %2", "unary_grad tanh %3 %1",
              "scale %4 0.1", "maximum %5 %0"},
             {ElementType::F32, ElementType::F32});
  std::string source =
      fusedElementwiseSource(program, fusedKernelLayout({{4}, {4}}, {4}));
  EXPECT_TRUE(contains(source, "const float s2 = trellis::applyUnary("
                               "trellis::UnaryFunction::Silu, s0);"));
  EXPECT_TRUE(contains(source, "const float s3 = trellis::applyUnary("
                               "trellis::UnaryFunction::GeluTanh, "
                               "asLoaded(s2));"));
  EXPECT_TRUE(contains(source, "const float s4 = __fmul_rn(trellis::"
                               "unaryDerivative(trellis::UnaryFunction::Tanh, "
                               "asLoaded(s3)), s1);"));
  EXPECT_TRUE(contains(source, "// s5 = scale %4 0.10000000000000001 (f32)\n"
                               "    const float s5 = __fmul_rn(s4, "
                               "__uint_as_float(0x3dcccccdu));"));
  EXPECT_TRUE(contains(source, "const float s6 = trellis::applyBinary("
                               "trellis::BinaryFunction::Maximum, s5, s0);"));
  EXPECT_FALSE(contains(source, "i64 rest"));
  EXPECT_TRUE(contains(source, "((float *)a.out)[i] = s6;"));
}

TEST(FusedElementwiseSourceTest, EmbedsTheSharedFormulas) {
  bool unary = false, binary = false;
  for (const SourceHeader &header : fusedElementwiseHeaders()) {
    if (std::string(header.name) == "trellis/Common/UnaryFunctions.h")
      unary = contains(header.text, "inline float applyUnary(UnaryFunction fn");
    if (std::string(header.name) == "trellis/Common/BinaryFunctions.h")
      binary = contains(header.text, "inline float applyBinary(BinaryFunction");
  }
  EXPECT_TRUE(unary);
  EXPECT_TRUE(binary);
}

/// NVRTC where it opens; the test is skipped elsewhere.
bool nvrtcOpens() { return SharedLibrary::open(nvrtcLibrary()).ok(); }

TEST(FusedElementwiseSourceTest, CompilesToCubinForSm90) {
  if (!nvrtcOpens())
    GTEST_SKIP() << "NVRTC is not installed here";
  // Every unary function and dtype, a broadcast and a single input.
  FusedProgram program = parsed(
      {"neg %0", "exp %3", "log %4", "tanh %5", "sqrt %6", "rsqrt %7",
       "sigmoid %8", "silu %9", "gelu %10", "gelu_tanh %11", "relu %12",
       "unary_grad gelu %13 %1", "scale %14 0.5", "sub %15 %2", "div %16 %1",
       "cast f16 %17", "mul %18 %18", "cast bf16 %19", "cast f32 %20"},
      {ElementType::F32, ElementType::F32, ElementType::F32});
  StatusOr<std::string> cubin = compileFusedSource(
      fusedElementwiseSource(program,
                             fusedKernelLayout({{2, 3}, {3}, {1}}, {2, 3})),
      90);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  // An ELF image.
  ASSERT_GT(cubin->size(), 4u);
  EXPECT_EQ(cubin->substr(0, 4), "\x7f"
                                 "ELF");
  StatusOr<std::string> bf16 = compileFusedSource(bf16ChainSource(), 90);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
}

TEST(FusedElementwiseSourceTest, ACompileFailureCarriesNvrtcsLog) {
  if (!nvrtcOpens())
    GTEST_SKIP() << "NVRTC is not installed here";
  StatusOr<std::string> cubin = compileFusedSource(
      "extern \"C\" __global__ void k() { undeclared(); }", 90);
  ASSERT_FALSE(cubin.ok());
  EXPECT_TRUE(contains(cubin.status().message(),
                       "cuda: NVRTC could not compile a fused_elementwise "
                       "kernel for sm_90 (NVRTC_ERROR_COMPILATION):\n"));
  EXPECT_TRUE(contains(cubin.status().message(), "undeclared"));
}

} // namespace
