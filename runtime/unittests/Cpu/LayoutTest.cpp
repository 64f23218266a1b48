//===- LayoutTest.cpp - Layout ops over the threads -----------------------===//
//
// Transpose, slice, pad, concat and broadcast_to on tensors large enough to
// be split over 2 threads (ragged last pieces included), f32 and bf16,
// against a reference computed here from each output element's index.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include <gtest/gtest.h>

#include <functional>

namespace trellis::runtime {
namespace {

using testing::DeviceTensors;
using testing::integer;
using testing::integers;

using Index = std::vector<int64_t>;

/// The multi-index of `offset` in a row-major `shape`.
Index unravel(int64_t offset, const Index &shape) {
  Index index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = offset % shape[d];
    offset /= shape[d];
  }
  return index;
}

int64_t ravel(const Index &index, const Index &shape) {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    offset = offset * shape[d] + index[d];
  return offset;
}

/// For every output element: the value that `source(outputIndex)` names,
/// as (input, offset), or zero where it returns input -1.
using Source = std::function<std::pair<int, int64_t>(const Index &)>;

struct LayoutCase {
  std::string op;
  std::vector<Index> inputs;
  Index output;
  AttrMap attrs;
  Source source;
};

void expectLayout(const LayoutCase &c, DType dtype) {
  DeviceTensors tensors(2);
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ids.push_back(tensors.add(c.inputs[i], dtype, static_cast<int>(i) + 3));
    values.push_back(tensors.floats(ids.back()));
  }
  int64_t out = tensors.add(c.output, dtype);
  tensors.run(c.op, ids, out, c.attrs);
  std::vector<float> found = tensors.floats(out);
  int64_t elements = 1;
  for (int64_t size : c.output)
    elements *= size;
  ASSERT_EQ(static_cast<int64_t>(found.size()), elements);
  int64_t mismatches = 0;
  for (size_t e = 0; e < found.size(); ++e) {
    auto [input, offset] = c.source(unravel(static_cast<int64_t>(e), c.output));
    float expected = input < 0 ? 0.0f : values[input][offset];
    if (found[e] != expected && ++mismatches <= 5)
      ADD_FAILURE() << c.op << " (" << dtypeName(dtype) << ") element " << e
                    << ": " << found[e] << ", expected " << expected;
  }
  EXPECT_EQ(mismatches, 0) << c.op;
}

std::vector<LayoutCase> layoutCases() {
  std::vector<LayoutCase> cases;
  // A permutation of a 3-d tensor: 122880 elements, rows of 40.
  Index tShape{48, 40, 64};
  cases.push_back({"transpose",
                   {tShape},
                   {64, 48, 40},
                   {{"permutation", integers({2, 0, 1})}},
                   [tShape](const Index &o) {
                     return std::pair{0, ravel({o[1], o[2], o[0]}, tShape)};
                   }});
  // The middle third of a fused q/k/v weight (rows of 255: ragged pieces).
  Index sShape{257, 3, 255};
  cases.push_back(
      {"slice",
       {sShape},
       {257, 1, 255},
       {{"offsets", integers({0, 1, 0})}, {"sizes", integers({257, 1, 255})}},
       [sShape](const Index &o) {
         return std::pair{0, ravel({o[0], 1, o[2]}, sShape)};
       }});
  // Its gradient put back in place, zeros around it.
  Index pShape{257, 1, 255};
  cases.push_back(
      {"pad",
       {pShape},
       {257, 3, 255},
       {{"low", integers({0, 1, 0})}, {"high", integers({0, 1, 0})}},
       [pShape](const Index &o) {
         if (o[1] != 1)
           return std::pair{-1, int64_t(0)};
         return std::pair{0, ravel({o[0], 0, o[2]}, pShape)};
       }});
  // Along an inner dimension (rows of each input per outer index), and
  // along the first (each input one block).
  Index left{300, 70}, right{300, 130};
  cases.push_back({"concat",
                   {left, right},
                   {300, 200},
                   {{"dim", integer(1)}},
                   [=](const Index &o) {
                     return o[1] < 70
                                ? std::pair{0, ravel(o, left)}
                                : std::pair{1, ravel({o[0], o[1] - 70}, right)};
                   }});
  Index top{700, 96}, bottom{500, 96};
  cases.push_back(
      {"concat",
       {top, bottom},
       {1200, 96},
       {{"dim", integer(0)}},
       [=](const Index &o) {
         return o[0] < 700 ? std::pair{0, ravel(o, top)}
                           : std::pair{1, ravel({o[0] - 700, o[1]}, bottom)};
       }});
  Index bShape{1, 1, 384};
  cases.push_back({"broadcast_to",
                   {bShape},
                   {8, 33, 384},
                   {{"shape", integers({8, 33, 384})}},
                   [](const Index &o) {
                     return std::pair{0, o[2]};
                   }});
  return cases;
}

TEST(LayoutTest, ThreadedMovesPlaceEveryElement) {
  for (const LayoutCase &c : layoutCases())
    for (DType dtype : {DType::F32, DType::BF16})
      expectLayout(c, dtype);
}

} // namespace
} // namespace trellis::runtime
