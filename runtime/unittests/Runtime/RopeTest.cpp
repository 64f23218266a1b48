//===- RopeTest.cpp - Rotary embedding's pairs ----------------------------===//
//
// rope on hand-computed head vectors: the rotate-half pairs (i, i + dim/2)
// and the interleaved pairs (2i, 2i + 1) (GPT-J's rotate-every-two), each
// at its position's angle, and the inverse rotation undoing either.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::testing;

namespace {

/// rope of `x` [1, seq, 1, 4] with frequencies {1, 0.5}.
std::vector<float> rope(const std::vector<float> &x, int64_t seq,
                        bool interleaved, bool inverse) {
  DeviceTensors tensors;
  int64_t in = tensors.add({1, seq, 1, 4}, DType::F32);
  tensors.set(in, x);
  int64_t out = tensors.add({1, seq, 1, 4}, DType::F32);
  AttrValue frequencies;
  frequencies.kind = AttrKind::Reals;
  frequencies.reals = {1.0, 0.5};
  tensors.run("rope", {in}, {out},
              {{"frequencies", frequencies},
               {"interleaved", flag(interleaved)},
               {"inverse", flag(inverse)}});
  return tensors.floats(out);
}

TEST(RopeTest, PairsRotateByTheirPositionsAngle) {
  // Position 0 stays; position 1 turns pair 0 by 1 radian, pair 1 by 0.5.
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4};
  std::vector<float> half = rope(x, 2, false, false);
  std::vector<float> every = rope(x, 2, true, false);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(half[i], x[i]);
    EXPECT_FLOAT_EQ(every[i], x[i]);
  }
  double c1 = std::cos(1.0), s1 = std::sin(1.0);
  double c5 = std::cos(0.5), s5 = std::sin(0.5);
  // Rotate half: pairs (x0, x2) and (x1, x3).
  EXPECT_NEAR(half[4], 1 * c1 - 3 * s1, 1e-6);
  EXPECT_NEAR(half[6], 3 * c1 + 1 * s1, 1e-6);
  EXPECT_NEAR(half[5], 2 * c5 - 4 * s5, 1e-6);
  EXPECT_NEAR(half[7], 4 * c5 + 2 * s5, 1e-6);
  // Interleaved: pairs (x0, x1) and (x2, x3).
  EXPECT_NEAR(every[4], 1 * c1 - 2 * s1, 1e-6);
  EXPECT_NEAR(every[5], 2 * c1 + 1 * s1, 1e-6);
  EXPECT_NEAR(every[6], 3 * c5 - 4 * s5, 1e-6);
  EXPECT_NEAR(every[7], 4 * c5 + 3 * s5, 1e-6);
}

TEST(RopeTest, TheInverseUndoesEitherPairing) {
  std::vector<float> x = {0.5f, -1, 2, 0.25f, -3, 1, 1.5f, -0.5f,
                          2,    1,  0, -1,    1,  1, -2,   3};
  for (bool interleaved : {false, true}) {
    std::vector<float> back =
        rope(rope(x, 4, interleaved, false), 4, interleaved, true);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(back[i], x[i], 1e-5) << "interleaved " << interleaved;
  }
}

} // namespace
