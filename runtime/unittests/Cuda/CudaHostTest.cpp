//===- CudaHostTest.cpp - The CUDA backend's host-side logic --------------===//
//
// What a CPU can check of the CUDA backend: the cuBLASLt argument mapping
// against the CPU's matmul, launch geometry over tail sizes, and the
// library search.
//
//===----------------------------------------------------------------------===//

#include "../../cuda/CudaLibraries.h"
#include "../../cuda/GemmMapping.h"
#include "../../cuda/LaunchGeometry.h"

#include "trellis/Runtime/Backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::cuda;

namespace {

struct MatmulCase {
  std::vector<int64_t> lhs, rhs;
  bool transposeLhs, transposeRhs;
};

std::string caseName(const ::testing::TestParamInfo<MatmulCase> &info) {
  const MatmulCase &c = info.param;
  std::string name = c.transposeLhs ? "T" : "N";
  name += c.transposeRhs ? "T" : "N";
  for (const std::vector<int64_t> *shape : {&c.lhs, &c.rhs}) {
    name += "_";
    for (size_t d = 0; d < shape->size(); ++d)
      name += (d ? "x" : "") + std::to_string((*shape)[d]);
  }
  return name;
}

class GemmMappingTest : public ::testing::TestWithParam<MatmulCase> {};

/// The CPU backend's matmul of `lhs` and `rhs`.
std::vector<float> cpuMatmul(const MatmulCase &c, std::vector<float> &lhs,
                             std::vector<float> &rhs,
                             const std::vector<int64_t> &resultShape) {
  std::unique_ptr<Device> device =
      std::move(*(*findBackend("cpu"))->createDevice({}));
  Instruction instruction;
  instruction.op = "matmul";
  instruction.inputs = {0, 1};
  instruction.outputs = {2};
  instruction.attrs["transpose_lhs"].kind = AttrValue::Kind::Bool;
  instruction.attrs["transpose_lhs"].flag = c.transposeLhs;
  instruction.attrs["transpose_rhs"].kind = AttrValue::Kind::Bool;
  instruction.attrs["transpose_rhs"].flag = c.transposeRhs;
  int64_t count = 1;
  for (int64_t size : resultShape)
    count *= size;
  std::vector<float> result(count);
  std::vector<Tensor> tensors = {
      Tensor(BufferDesc{c.lhs}, lhs.data()),
      Tensor(BufferDesc{c.rhs}, rhs.data()),
      Tensor(BufferDesc{resultShape}, result.data())};
  AxisList axes;
  Status status =
      device->launch(KernelArgs{instruction, BufferTable(tensors), axes});
  EXPECT_TRUE(status.ok()) << status.message();
  return result;
}

TEST_P(GemmMappingTest, CublasLtArgumentsComputeTheRowMajorProduct) {
  const MatmulCase &c = GetParam();
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto filled = [&](const std::vector<int64_t> &shape) {
    int64_t count = 1;
    for (int64_t size : shape)
      count *= size;
    std::vector<float> values(count);
    for (float &value : values)
      value = uniform(random);
    return values;
  };
  std::vector<float> lhs = filled(c.lhs), rhs = filled(c.rhs);
  size_t rank = c.lhs.size();
  std::vector<int64_t> result(c.lhs.begin(), c.lhs.end() - 2);
  result.push_back(c.lhs[rank - (c.transposeLhs ? 1 : 2)]);
  result.push_back(c.rhs[c.rhs.size() - (c.transposeRhs ? 2 : 1)]);
  std::vector<float> expected = cpuMatmul(c, lhs, rhs, result);

  GemmMapping mapping = mapMatmul(c.lhs, c.rhs, c.transposeLhs, c.transposeRhs);
  std::vector<float> computed(expected.size(), -7.0f);
  // cuBLASLt's A is the rhs buffer, its B the lhs buffer.
  referenceColumnMajorGemm(mapping, rhs.data(), lhs.data(), computed.data());
  ASSERT_EQ(computed.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(computed[i], expected[i], 1e-4f) << "element " << i;
  // Every element of D is written: rows × columns × batch of them.
  EXPECT_EQ(mapping.rows * mapping.columns * mapping.batch,
            static_cast<int64_t>(expected.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmMappingTest,
    ::testing::Values(MatmulCase{{5, 3}, {3, 7}, false, false},
                      MatmulCase{{3, 5}, {3, 7}, true, false},
                      MatmulCase{{5, 3}, {7, 3}, false, true},
                      MatmulCase{{3, 5}, {7, 3}, true, true},
                      // A shared rhs: the batches fold into the rows.
                      MatmulCase{{2, 3, 5, 4}, {4, 6}, false, false},
                      MatmulCase{{2, 3, 5, 4}, {6, 4}, false, true},
                      // Transposed batches keep a batched call.
                      MatmulCase{{3, 4, 5}, {4, 6}, true, false},
                      MatmulCase{{3, 5, 4}, {3, 4, 6}, false, false},
                      MatmulCase{{3, 4, 5}, {3, 6, 4}, true, true},
                      MatmulCase{{1, 1}, {1, 33}, false, false}),
    caseName);

TEST(LaunchGeometryTest, GridStrideLoopsCoverEveryElementOnce) {
  for (int64_t elements : {int64_t(0), int64_t(1), int64_t(255), int64_t(257),
                           int64_t(65537), kMaxBlocks * 256 * 3 + 17}) {
    LaunchGeometry geometry = elementwiseGeometry(elements);
    EXPECT_GE(geometry.blocks, 1);
    EXPECT_LE(geometry.blocks, kMaxBlocks);
    int64_t grid = geometry.blocks * geometry.threads;
    std::vector<int> visits(elements, 0);
    for (int64_t thread = 0; thread < grid; ++thread)
      for (int64_t i = thread; i < elements; i += grid)
        ++visits[i];
    for (int64_t i = 0; i < elements; ++i)
      ASSERT_EQ(visits[i], 1) << "element " << i << " of " << elements;
  }
}

TEST(LaunchGeometryTest, RowBlocksAreWarpMultiplesWithinTheLimit) {
  EXPECT_EQ(rowThreads(1), 32);
  EXPECT_EQ(rowThreads(33), 64);
  EXPECT_EQ(rowThreads(768), 768);
  EXPECT_EQ(rowThreads(50257), 1024);
  EXPECT_EQ(rowGeometry(0, 32).blocks, 1);
  EXPECT_EQ(rowGeometry(kMaxBlocks + 5, 32).blocks, kMaxBlocks);
}

TEST(CudaLibrariesTest, AMissingLibraryNamesEveryPlaceTried) {
  LibrarySpec missing{"a test library", {"libtrellis-missing.so.1"}, "none"};
  ::setenv("TRELLIS_CUDA_LIBRARY_PATH", "/tmp", 1);
  StatusOr<SharedLibrary> library = SharedLibrary::open(missing);
  ::unsetenv("TRELLIS_CUDA_LIBRARY_PATH");
  ASSERT_FALSE(library.ok());
  const std::string &message = library.status().message();
  EXPECT_NE(message.find("a test library (libtrellis-missing.so.1) not found"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("/tmp, the dynamic linker's search"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("; set TRELLIS_CUDA_LIBRARY_PATH to the directory "
                         "that holds it"),
            std::string::npos);
}

TEST(CudaLibrariesTest, TheToolkitsLibrariesLoadWithoutAGpu) {
  // Opening a library needs no GPU; where the toolkit is installed (CI
  // here), cuBLASLt and NCCL load and expose the entry points the backend
  // uses.
  for (const LibrarySpec *spec : {&cublasLtLibrary(), &ncclLibrary()}) {
    StatusOr<SharedLibrary> library = SharedLibrary::open(*spec);
    if (!library.ok())
      GTEST_SKIP() << "no CUDA toolkit here: " << library.status().message();
    const char *symbol =
        spec == &ncclLibrary() ? "ncclGetUniqueId" : "cublasLtMatmul";
    EXPECT_TRUE(library->symbol(symbol).ok()) << library->path();
    StatusOr<void *> absent = library->symbol("trellisNoSuchSymbol");
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.status().message().find(
                  "has no trellisNoSuchSymbol (expected the CUDA 13 version)"),
              std::string::npos);
  }
}

TEST(CudaBackendTest, NcclNeedsACudaDevice) {
  StatusOr<const Backend *> cuda = findBackend("cuda");
  if (!cuda.ok())
    GTEST_SKIP() << "built without the CUDA backend: "
                 << cuda.status().message();
  std::unique_ptr<Device> cpu =
      std::move(*(*findBackend("cpu"))->createDevice({}));
  StatusOr<std::unique_ptr<Communicator>> connected = (*cuda)->connect(
      *cpu, *Mesh::parse("dp=2", nullptr), 0, {{0}}, {}, RendezvousOptions());
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().message(),
            "cuda: NCCL needs a cuda device, found 'cpu'");
}

} // namespace
