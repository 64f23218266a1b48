//===- RowKernelsTest.cpp - Reductions and norms over rows, 16-bit too ----===//
//
// Reductions and norms take bf16 and f16 operands themselves, a row (or a
// tile's row) at a time: their results are bit for bit those of the same
// kernel run on fp32 copies of the operands with the results rounded once
// (what `cast` ops around an f32 kernel give). Leading-dimension sums are
// split into tiles fixed by the shape: 1 and 2 threads give the same bits,
// and they match a double-precision reference, also where the chunks grow
// to bound the partial sums (wide rows) and for ragged tiles. An embedding
// lookup copies rows of its table's dtype as they are; cross-entropy reads
// 16-bit logits and writes their gradient as a cast of the fp32 one would.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace trellis;
using namespace trellis::runtime;
using namespace trellis::runtime::testing;

namespace {

struct RowCase {
  std::string op;
  std::vector<std::vector<int64_t>> inputs, outputs;
  AttrMap attrs;
};

/// `op` on 16-bit operands equals, bit for bit, `op` on fp32 copies of them
/// with its results cast back.
void expectSameAsFloatCopies(const RowCase &c, DType dtype) {
  DeviceTensors b;
  std::vector<int64_t> narrow, wide, narrowResults, wideResults, rounded;
  int seed = 1;
  for (const std::vector<int64_t> &shape : c.inputs) {
    narrow.push_back(b.add(shape, dtype, seed++));
    wide.push_back(b.cast(narrow.back(), DType::F32));
  }
  for (const std::vector<int64_t> &shape : c.outputs) {
    narrowResults.push_back(b.add(shape, dtype));
    wideResults.push_back(b.add(shape, DType::F32));
  }
  b.run(c.op, narrow, narrowResults, c.attrs);
  b.run(c.op, wide, wideResults, c.attrs);
  for (size_t i = 0; i < wideResults.size(); ++i) {
    int64_t expected = b.cast(wideResults[i], dtype);
    EXPECT_EQ(b.bytes(expected), b.bytes(narrowResults[i]))
        << c.op << " result " << i;
  }
}

std::vector<RowCase> rowCases() {
  // 700 rows of 96: 22 chunks of 32 rows (the last one ragged), rows longer
  // than a vector with a tail.
  std::vector<int64_t> rows{7, 100, 96}, feature{96};
  return {
      {"reduce_sum", {rows}, {feature}, {{"dims", integers({0, 1})}}},
      {"reduce_mean", {rows}, {{7, 96}}, {{"dims", integers({1})}}},
      {"reduce_max", {rows}, {{7, 1, 96}}, {{"dims", integers({1})}}},
      {"reduce_sum", {rows}, {{7, 100, 1}}, {{"dims", integers({2})}}},
      {"softmax", {rows}, {rows}, {}},
      {"softmax_grad", {rows, rows}, {rows}, {}},
      {"layer_norm",
       {rows, feature, feature},
       {rows},
       {{"epsilon", real(1e-5)}}},
      {"layer_norm_grad",
       {rows, feature, rows},
       {rows, feature, feature},
       {{"epsilon", real(1e-5)}}},
      {"rms_norm", {rows, feature}, {rows}, {{"epsilon", real(1e-6)}}},
      {"rms_norm_grad",
       {rows, feature, rows},
       {rows, feature},
       {{"epsilon", real(1e-6)}}},
  };
}

TEST(RowKernelsTest, Bf16OperandsGiveTheFloatCopiesResults) {
  for (const RowCase &c : rowCases())
    expectSameAsFloatCopies(c, DType::BF16);
}

TEST(RowKernelsTest, F16OperandsGiveTheFloatCopiesResults) {
  for (const RowCase &c : rowCases())
    expectSameAsFloatCopies(c, DType::F16);
}

/// Cross-entropy and its gradient read 16-bit logits themselves: the loss
/// equals the loss of fp32 copies bit for bit, the gradient the fp32
/// gradient cast back. Rows of 1500 classes take the online pass over two
/// blocks (a ragged one last).
void expectCrossEntropyAsFloatCopies(DType dtype) {
  DeviceTensors b;
  int64_t rows = 300, classes = 1500;
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = static_cast<int32_t>((r * 577) % classes);
  int64_t targets = b.addIds(ids);
  int64_t narrow = b.add({rows, classes}, dtype, 1);
  int64_t wide = b.cast(narrow, DType::F32);
  int64_t upstream = b.add({}, DType::F32, 2);
  AttrMap attrs{{"normalizer", integer(0)}};
  int64_t narrowLoss = b.add({}, DType::F32), wideLoss = b.add({}, DType::F32);
  b.run("cross_entropy", {narrow, targets}, narrowLoss, attrs);
  b.run("cross_entropy", {wide, targets}, wideLoss, attrs);
  b.expectSameBits(wideLoss, narrowLoss);
  int64_t narrowGrad = b.add({rows, classes}, dtype);
  int64_t wideGrad = b.add({rows, classes}, DType::F32);
  b.run("cross_entropy_grad", {narrow, targets, upstream}, narrowGrad, attrs);
  b.run("cross_entropy_grad", {wide, targets, upstream}, wideGrad, attrs);
  b.expectSameBits(b.cast(wideGrad, dtype), narrowGrad);
}

TEST(RowKernelsTest, CrossEntropyReadsSixteenBitLogits) {
  expectCrossEntropyAsFloatCopies(DType::BF16);
  expectCrossEntropyAsFloatCopies(DType::F16);
}

TEST(RowKernelsTest, EmbeddingCopiesRowsOfItsTablesDtype) {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    DeviceTensors b;
    int64_t table = b.add({50, 40}, dtype, 9);
    // 2000 tokens (a threaded copy); ids outside the table give zeros.
    std::vector<int32_t> ids(2000);
    for (size_t t = 0; t < ids.size(); ++t)
      ids[t] = static_cast<int32_t>((t * 7) % 53);
    int64_t out = b.add({2000, 40}, dtype);
    b.run("embedding", {table, b.addIds(ids)}, {out});
    std::vector<char> rows = b.bytes(table), found = b.bytes(out);
    int64_t rowBytes = 40 * dtypeBytes(dtype);
    std::vector<char> zeros(rowBytes, 0);
    for (size_t t = 0; t < ids.size(); ++t)
      EXPECT_EQ(0, std::memcmp(found.data() + t * rowBytes,
                               ids[t] < 50 ? rows.data() + ids[t] * rowBytes
                                           : zeros.data(),
                               rowBytes))
          << "token " << t << " (id " << ids[t] << ")";
  }
}

TEST(RowKernelsTest, EmbeddingGradLeavesThePaddingRowAlone) {
  // A shard of rows [4, 8) of a 12-row table (vocab_offset 4); the padding
  // row is id 5 of the full table, row 1 of the shard.
  DeviceTensors b;
  std::vector<int32_t> ids = {5, 4, 5, 7, 0, 11, 6, 5};
  int64_t grad = b.add({8, 3}, DType::F32, 3);
  int64_t out = b.add({4, 3}, DType::F32);
  b.run("embedding_grad", {b.addIds(ids), grad}, out,
        AttrMap{{"num_embeddings", integer(4)},
                {"vocab_offset", integer(4)},
                {"padding_idx", integer(5)}});
  std::vector<float> upstream = b.floats(grad), found = b.floats(out);
  std::vector<float> expected(12, 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 4 && ids[t] < 8 && ids[t] != 5)
      for (int c = 0; c < 3; ++c)
        expected[(ids[t] - 4) * 3 + c] += upstream[t * 3 + c];
  EXPECT_EQ(found, expected);
  EXPECT_EQ(found[3], 0.0f);
  EXPECT_EQ(found[4], 0.0f);
  EXPECT_EQ(found[5], 0.0f);
}

/// reduce_sum over the leading dimensions of [rows, columns] with `threads`
/// threads, as fp32 values.
std::vector<float> leadingSum(int threads, int64_t rows, int64_t columns,
                              DType dtype, std::vector<float> *inputs) {
  DeviceTensors b(threads);
  int64_t x = b.add({rows, columns}, dtype, 3), sum = b.add({columns}, dtype);
  b.run("reduce_sum", {x}, {sum}, {{"dims", integers({0})}});
  if (inputs)
    *inputs = b.floats(x);
  return b.floats(sum);
}

void expectLeadingSumsExact(int64_t rows, int64_t columns, DType dtype) {
  std::vector<float> x;
  std::vector<float> one = leadingSum(1, rows, columns, dtype, &x);
  std::vector<float> two = leadingSum(2, rows, columns, dtype, nullptr);
  ASSERT_EQ(one.size(), static_cast<size_t>(columns));
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)))
      << rows << " x " << columns << ": 1 and 2 threads differ";
  // Inputs with 11 significant bits, sums in double: exact, so the only
  // error is the final rounding.
  for (int64_t c = 0; c < columns; ++c) {
    double reference = 0;
    for (int64_t r = 0; r < rows; ++r)
      reference += x[r * columns + c];
    float expected = static_cast<float>(reference);
    if (dtype == DType::BF16)
      expected = bfloat16ToFloat(floatToBfloat16(expected));
    ASSERT_EQ(expected, one[c]) << rows << " x " << columns << " column " << c;
  }
}

TEST(RowKernelsTest, LeadingSumsAreExactAndThreadCountIndependent) {
  expectLeadingSumsExact(1000, 768, DType::F32); // 16 chunks, 2 blocks
  expectLeadingSumsExact(1000, 768, DType::BF16);
  expectLeadingSumsExact(3, 1000, DType::F32);   // one chunk, ragged block
  expectLeadingSumsExact(20000, 3, DType::F32);  // 254 chunks of 79 rows
  // At most 116 partial rows of 9000: 100 chunks of 3 rows.
  expectLeadingSumsExact(300, 9000, DType::F32);
}

} // namespace
