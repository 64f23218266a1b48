//===- ConformanceTest.cpp - Every op row on every backend ----------------===//
//
// After IREE's CTS: every compute row of the op table, on sample instances
// with tail sizes (dimensions no vector width divides), in every float
// dtype the row takes, on every registered backend, against a reference:
// the CPU backend's f32 run of the same inputs (rounded to the dtype
// under test first). A backend's f32 run must equal it to 1e-5 relative
// (the CPU's own f32 run is the reference, so for it this checks the
// launch alone); a 16-bit run must be within a few units in the last place
// of its dtype, measured against the result's scale. Every run is also
// repeated and must give the same bits.
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include "trellis/Runtime/Backend.h"

#include "trellis/Common/HalfFloat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace trellis::runtime {
namespace {

using namespace trellis::runtime::testing;

//===----------------------------------------------------------------------===//
// Sample instances
//===----------------------------------------------------------------------===//

/// One operand of a sample: its shape and how its values are drawn.
struct Operand {
  std::vector<int64_t> shape;
  /// Values in [-2, 2), or (`positive`) in [0.5, 2.5), or (ids > 0) token
  /// ids in [0, ids).
  bool positive = false;
  int64_t ids = 0;
  /// A scalar f32 operand holding exactly this value (an optimizer step,
  /// a loss gradient).
  std::optional<float> value;
};

struct Sample {
  std::string name;
  std::vector<Operand> operands;
  AttrMap attrs;
  /// Outputs that hold a value before the launch (an accumulator read by
  /// `accumulate`): filled like inputs.
  bool outputsRead = false;
};

Operand values(std::vector<int64_t> shape) {
  Operand operand;
  operand.shape = std::move(shape);
  return operand;
}
Operand positive(std::vector<int64_t> shape) {
  Operand operand = values(std::move(shape));
  operand.positive = true;
  return operand;
}
Operand ids(std::vector<int64_t> shape, int64_t range) {
  Operand operand = values(std::move(shape));
  operand.ids = range;
  return operand;
}
Operand scalar(float value) {
  Operand operand = values({});
  operand.value = value;
  return operand;
}

/// Samples of every compute row, by op name. Shapes have tail sizes: odd
/// row lengths and counts no vector width or thread split divides.
std::map<std::string, std::vector<Sample>> samples() {
  std::map<std::string, std::vector<Sample>> all;
  auto add = [&](const std::string &op, Sample sample) {
    all[op].push_back(std::move(sample));
  };
  add("fill",
      {"5x37", {}, {{"shape", integers({5, 37})}, {"value", real(0.75)}}});
  for (const char *op : {"add", "sub", "mul", "maximum", "equal_mask"}) {
    add(op, {"same", {values({7, 37}), values({7, 37})}, {}});
    add(op, {"broadcast", {values({3, 7, 37}), values({37})}, {}});
  }
  add("div", {"broadcast", {values({7, 37}), positive({1, 37})}, {}});
  for (const char *op : {"neg", "exp", "tanh", "sigmoid", "silu", "gelu",
                         "gelu_tanh", "relu", "softplus", "abs", "softmax"})
    add(op, {"3x5x37", {values({3, 5, 37})}, {}});
  for (const char *op : {"log", "sqrt", "rsqrt"})
    add(op, {"3x5x37", {positive({3, 5, 37})}, {}});
  add("scale", {"7x37", {values({7, 37})}, {{"factor", real(-0.375)}}});
  add("cast", {"to f32", {values({7, 37})}, {{"to", text("f32")}}});
  add("cast", {"to bf16", {values({7, 37})}, {{"to", text("bf16")}}});
  add("accumulate", {"first", {values({7, 37})}, {{"first", flag(true)}}});
  add("accumulate", {"sum", {values({7, 37})}, {{"first", flag(false)}}, true});
  add("unary_grad", {"gelu_tanh",
                     {values({5, 37}), values({5, 37})},
                     {{"function", text("gelu_tanh")}}});
  add("unary_grad", {"rsqrt",
                     {positive({5, 37}), values({5, 37})},
                     {{"function", text("rsqrt")}}});
  add("fused_elementwise",
      {"bias gelu",
       {values({5, 37}), values({37})},
       {{"program", texts({"add %0 %1", "gelu_tanh %2", "scale %3 0.5"})}}});
  add("softmax_grad", {"5x37", {values({5, 37}), values({5, 37})}, {}});

  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    add(op, {"last", {values({3, 5, 37})}, {{"dims", integers({2})}}});
    add(op, {"leading kept",
             {values({3, 5, 37})},
             {{"dims", integers({0, 1})}, {"keep_dims", flag(true)}}});
  }
  add("broadcast_to", {"rows", {values({37})}, {{"shape", integers({5, 37})}}});
  add("reshape",
      {"merge", {values({3, 5, 37})}, {{"shape", integers({15, 37})}}});
  add("transpose", {"last two",
                    {values({3, 5, 37})},
                    {{"permutation", integers({0, 2, 1})}}});
  add("slice", {"box",
                {values({5, 37})},
                {{"offsets", integers({1, 3})}, {"sizes", integers({3, 29})}}});
  add("pad", {"both",
              {values({5, 37})},
              {{"low", integers({1, 0})}, {"high", integers({2, 3})}}});
  add("concat",
      {"dim 1", {values({5, 37}), values({5, 11})}, {{"dim", integer(1)}}});

  add("matmul", {"2-d", {values({37, 29}), values({29, 53})}, {}});
  add("matmul",
      {"batched rhs shared", {values({3, 7, 29}), values({29, 13})}, {}});
  add("matmul",
      {"transposed",
       {values({29, 37}), values({13, 29})},
       {{"transpose_lhs", flag(true)}, {"transpose_rhs", flag(true)}}});
  // A weight gradient's product written as its f32 gradient.
  add("matmul", {"f32 result",
                 {values({37, 29}), values({37, 13})},
                 {{"transpose_lhs", flag(true)}, {"f32_result", flag(true)}}});
  // A weight gradient's product: written at the step's first, added after.
  add("matmul_accumulate",
      {"first",
       {values({37, 29}), values({37, 13})},
       {{"transpose_lhs", flag(true)}, {"first", flag(true)}}});
  add("matmul_accumulate",
      {"sum",
       {values({37, 29}), values({37, 13})},
       {{"transpose_lhs", flag(true)}, {"first", flag(false)}},
       true});
  add("matmul_accumulate",
      {"batched rhs shared", {values({3, 7, 29}), values({29, 13})}, {}, true});
  AttrMap epsilon = {{"epsilon", real(1e-5)}};
  add("layer_norm",
      {"3x37", {values({3, 37}), values({37}), values({37})}, epsilon});
  add("layer_norm_grad",
      {"3x37", {values({3, 37}), values({37}), values({3, 37})}, epsilon});
  add("rms_norm", {"3x37", {values({3, 37}), values({37})}, epsilon});
  add("rms_norm_grad",
      {"3x37", {values({3, 37}), values({37}), values({3, 37})}, epsilon});
  add("embedding", {"2x5 of 11", {values({11, 37}), ids({2, 5}, 11)}, {}});
  add("embedding_grad", {"2x5 of 11",
                         {ids({2, 5}, 11), values({2, 5, 37})},
                         {{"num_embeddings", integer(11)}}});
  add("rope", {"dim 8",
               {values({2, 5, 3, 8})},
               {{"frequencies", reals({1.0, 0.1, 0.01, 0.001})}}});
  add("rope", {"dim 8, interleaved",
               {values({2, 5, 3, 8})},
               {{"frequencies", reals({1.0, 0.1, 0.01, 0.001})},
                {"interleaved", flag(true)}}});
  add("positions", {"13", {}, {{"length", integer(13)}}});
  add("constant", {"2x3",
                   {},
                   {{"shape", integers({2, 3})},
                    {"values", reals({0.5, -1.0, 0.25, 3.0, 0.0, -0.125})}}});
  add("cross_entropy", {"2x5 of 37",
                        {values({2, 5, 37}), ids({2, 5}, 37)},
                        {{"normalizer", integer(10)}}});
  add("cross_entropy_grad",
      {"2x5 of 37",
       {values({2, 5, 37}), ids({2, 5}, 37), scalar(1.0f)},
       {{"normalizer", integer(10)}}});

  AttrMap attention = {{"scale", real(0.35)}, {"causal", flag(true)}};
  add("attention",
      {"grouped, causal",
       {values({2, 7, 4, 8}), values({2, 7, 2, 8}), values({2, 7, 2, 8})},
       attention});
  add("attention_grad", {"grouped, causal",
                         {values({2, 7, 4, 8}), values({2, 7, 2, 8}),
                          values({2, 7, 2, 8}), values({2, 7, 4, 8})},
                         attention});
  AttrMap windowed = {{"scale", real(0.35)},
                      {"causal", flag(true)},
                      {"window", integer(3)},
                      {"softcap", real(1.5)}};
  add("attention",
      {"sliding window, soft-capped",
       {values({2, 7, 4, 8}), values({2, 7, 2, 8}), values({2, 7, 2, 8})},
       windowed});
  add("attention_grad", {"sliding window, soft-capped",
                         {values({2, 7, 4, 8}), values({2, 7, 2, 8}),
                          values({2, 7, 2, 8}), values({2, 7, 4, 8})},
                         windowed});
  // ALiBi's slopes and sinks, one per query head.
  AttrMap termed = {{"scale", real(0.35)},
                    {"causal", flag(true)},
                    {"operandSegmentSizes", integers({1, 1, 1, 1, 1})}};
  add("attention", {"ALiBi and sinks",
                    {values({2, 7, 4, 8}), values({2, 7, 2, 8}),
                     values({2, 7, 2, 8}), values({4}), values({4})},
                    termed});
  termed["operandSegmentSizes"] = integers({1, 1, 1, 1, 1, 1});
  add("attention_grad",
      {"ALiBi and sinks",
       {values({2, 7, 4, 8}), values({2, 7, 2, 8}), values({2, 7, 2, 8}),
        values({2, 7, 4, 8}), values({4}), values({4})},
       termed});
  AttrMap block = {
      {"scale", real(0.35)}, {"causal", flag(true)}, {"shift", integer(0)}};
  add("attention_block",
      {"diagonal block",
       {values({2, 5, 4, 8}), values({2, 5, 2, 8}), values({2, 5, 2, 8})},
       block});
  add("attention_merge", {"two blocks",
                          {values({2, 5, 4, 8}), values({2, 4, 5}),
                           values({2, 5, 4, 8}), values({2, 4, 5})},
                          {}});
  add("attention_block_grad",
      {"diagonal block",
       {values({2, 5, 4, 8}), values({2, 5, 2, 8}), values({2, 5, 2, 8}),
        values({2, 5, 4, 8}), values({2, 4, 5}), values({2, 5, 4, 8})},
       block});

  add("moe_route", {"softmax, renormalized",
                    {values({3, 5, 7})},
                    {{"top_k", integer(2)}, {"normalize", flag(true)}}});
  add("moe_route", {"sigmoid, scaled",
                    {values({3, 5, 7})},
                    {{"top_k", integer(3)},
                     {"scoring", text("sigmoid")},
                     {"normalize", flag(true)},
                     {"scaling", real(2.5)}}});
  add("moe_route", {"sigmoid, biased, grouped",
                    {values({3, 5, 8}), values({8})},
                    {{"top_k", integer(3)},
                     {"scoring", text("sigmoid")},
                     {"normalize", flag(true)},
                     {"scaling", real(2.5)},
                     {"groups", integer(4)},
                     {"top_groups", integer(2)}}});
  add("expert_bias_update",
      {"mean load", {values({8}), positive({8})}, {{"rate", real(0.001)}}});
  add("moe_route_grad",
      {"softmax",
       {values({3, 5, 7}), ids({3, 5, 2}, 7), values({3, 5, 2})},
       {{"top_k", integer(2)}}});
  add("moe_route_grad",
      {"sigmoid, renormalized",
       {values({3, 5, 7}), ids({3, 5, 2}, 7), values({3, 5, 2})},
       {{"top_k", integer(2)},
        {"scoring", text("sigmoid")},
        {"normalize", flag(true)}}});
  add("expert_matmul",
      {"a row per token",
       {values({2, 5, 13}), values({3, 13, 11}), ids({2, 5, 2}, 3)},
       {}});
  add("expert_matmul",
      {"a row per slot, transposed",
       {values({2, 5, 2, 13}), values({3, 11, 13}), ids({2, 5, 2}, 3)},
       {{"transpose_rhs", flag(true)}}});
  add("expert_matmul_weight_grad",
      {"a row per token",
       {values({2, 5, 13}), values({2, 5, 2, 11}), ids({2, 5, 2}, 3)},
       {{"num_experts", integer(3)}}});
  add("expert_matmul_weight_grad",
      {"a row per slot, transposed",
       {values({2, 5, 2, 13}), values({2, 5, 2, 11}), ids({2, 5, 2}, 5)},
       {{"num_experts", integer(5)}, {"transpose_rhs", flag(true)}}});
  add("expert_counts",
      {"2x5 of 3", {ids({2, 5, 2}, 3)}, {{"num_experts", integer(3)}}});

  add("adamw",
      {"37",
       {values({37}), values({37}), values({37}), positive({37}), scalar(3.0f)},
       {{"learning_rate", real(1e-2)},
        {"beta1", real(0.9)},
        {"beta2", real(0.999)},
        {"epsilon", real(1e-8)},
        {"weight_decay", real(0.1)}}});
  add("sgd", {"37",
              {values({37}), values({37})},
              {{"learning_rate", real(0.1)}, {"weight_decay", real(0.01)}}});
  return all;
}

//===----------------------------------------------------------------------===//
// Runs
//===----------------------------------------------------------------------===//

float readElement(const void *data, DType dtype, int64_t i) {
  switch (dtype) {
  case DType::F32:
    return static_cast<const float *>(data)[i];
  case DType::BF16:
    return bfloat16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case DType::F16:
    return halfToFloat(static_cast<const uint16_t *>(data)[i]);
  case DType::I32:
    return static_cast<float>(static_cast<const int32_t *>(data)[i]);
  }
  return 0;
}

/// `value` as `dtype` holds it.
float roundTo(float value, DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return bfloat16ToFloat(floatToBfloat16(value));
  case DType::F16:
    return halfToFloat(floatToHalf(value));
  default:
    return value;
  }
}

/// One launch of a sample on one device: its operands' values (as f32,
/// already rounded to their dtypes) in, its results' values and bits out.
struct LaunchResult {
  std::vector<std::vector<float>> results;
  std::vector<std::vector<char>> bits;
  std::string failure;
};

class Launcher {
public:
  explicit Launcher(Device &device) : device_(device) {}

  /// Runs `op` with operands of `types` holding `inputs`; results of
  /// `resultTypes`, those `outputsRead` starting from `initial`.
  LaunchResult run(const std::string &op, const std::vector<TensorType> &types,
                   const std::vector<std::vector<float>> &inputs,
                   const std::vector<TensorType> &resultTypes,
                   const AttrMap &attrs,
                   const std::vector<std::vector<float>> &initial) {
    LaunchResult run;
    std::vector<Tensor> tensors;
    std::vector<std::unique_ptr<DeviceAllocation>> memory;
    auto make = [&](const TensorType &type,
                    const std::vector<float> *values) -> bool {
      BufferDesc desc{type.shape, type.element};
      StatusOr<std::unique_ptr<DeviceAllocation>> allocation = device_.allocate(
          std::max<int64_t>(1, desc.numElements() * dtypeBytes(type.element)));
      if (!allocation.ok()) {
        run.failure = allocation.status().message();
        return false;
      }
      memory.push_back(std::move(*allocation));
      tensors.emplace_back(desc, memory.back()->data());
      std::vector<char> host(desc.numElements() * dtypeBytes(type.element));
      if (!values) {
        // A result the kernel must write whole: poisoned (all bits set, a
        // NaN in every float type), so one that reads it shows.
        std::fill(host.begin(), host.end(), char(0xFF));
        Status copied = device_.copyFromHost(host.data(), tensors.back());
        if (!copied.ok())
          run.failure = copied.message();
        return copied.ok();
      }
      for (int64_t i = 0; i < desc.numElements(); ++i) {
        float v = (*values)[i];
        switch (type.element) {
        case DType::F32:
          std::memcpy(host.data() + 4 * i, &v, 4);
          break;
        case DType::BF16: {
          uint16_t b = floatToBfloat16(v);
          std::memcpy(host.data() + 2 * i, &b, 2);
          break;
        }
        case DType::F16: {
          uint16_t h = floatToHalf(v);
          std::memcpy(host.data() + 2 * i, &h, 2);
          break;
        }
        case DType::I32: {
          int32_t n = static_cast<int32_t>(v);
          std::memcpy(host.data() + 4 * i, &n, 4);
          break;
        }
        }
      }
      Status copied = device_.copyFromHost(host.data(), tensors.back());
      if (!copied.ok())
        run.failure = copied.message();
      return copied.ok();
    };
    Instruction instruction;
    instruction.op = op;
    instruction.attrs = attrs;
    for (size_t i = 0; i < types.size(); ++i) {
      if (!make(types[i], &inputs[i]))
        return run;
      instruction.inputs.push_back(tensors.size() - 1);
    }
    for (size_t i = 0; i < resultTypes.size(); ++i) {
      if (!make(resultTypes[i], i < initial.size() ? &initial[i] : nullptr))
        return run;
      instruction.outputs.push_back(tensors.size() - 1);
    }
    AxisList axes;
    KernelArgs args{instruction, tensors, axes};
    StatusOr<std::unique_ptr<PreparedLaunch>> prepared = device_.prepare(args);
    if (!prepared.ok()) {
      run.failure = prepared.status().message();
      return run;
    }
    args.prepared = prepared->get();
    Status launched = device_.launch(args);
    if (launched.ok())
      launched = device_.synchronize();
    if (!launched.ok()) {
      run.failure = launched.message();
      return run;
    }
    for (int64_t output : instruction.outputs) {
      const Tensor &tensor = tensors[output];
      std::vector<char> host(tensor.bytes());
      Status copied = device_.copyToHost(tensor, host.data());
      if (!copied.ok()) {
        run.failure = copied.message();
        return run;
      }
      std::vector<float> values(tensor.size());
      for (int64_t i = 0; i < tensor.size(); ++i)
        values[i] = readElement(host.data(), tensor.desc().dtype, i);
      run.results.push_back(std::move(values));
      run.bits.push_back(std::move(host));
    }
    return run;
  }

private:
  Device &device_;
};

/// The element types a row's operand of `kind` takes in a run of `dtype`
/// (the dtype under test for its float operands).
DType operandType(OperandKind kind, DType dtype, const Operand &operand) {
  if (operand.ids > 0)
    return DType::I32;
  switch (kind) {
  case OperandKind::Float32:
    return DType::F32;
  case OperandKind::Index:
    return DType::I32;
  case OperandKind::Float:
  case OperandKind::Any:
    return dtype;
  }
  return dtype;
}

/// The sample's operand values, drawn from `seed`, rounded to `types`.
std::vector<std::vector<float>> drawOperands(const Sample &sample,
                                             const std::vector<DType> &types,
                                             uint32_t seed) {
  std::vector<std::vector<float>> all;
  uint32_t state = seed * 2654435761u + 7;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / float(1 << 24);
  };
  for (size_t i = 0; i < sample.operands.size(); ++i) {
    const Operand &operand = sample.operands[i];
    int64_t count = 1;
    for (int64_t size : operand.shape)
      count *= size;
    std::vector<float> values(count);
    for (float &value : values) {
      if (operand.value)
        value = *operand.value;
      else if (operand.ids > 0)
        value = static_cast<float>(
            std::min<int64_t>(operand.ids - 1, next() * operand.ids));
      else if (operand.positive)
        value = roundTo(0.5f + 2 * next(), types[i]);
      else
        value = roundTo(4 * next() - 2, types[i]);
    }
    all.push_back(std::move(values));
  }
  return all;
}

/// The largest magnitude among `values` (1 if none is larger).
float scaleOf(const std::vector<float> &values) {
  float scale = 1e-3f;
  for (float value : values)
    if (std::isfinite(value))
      scale = std::max(scale, std::fabs(value));
  return scale;
}

/// Units in the last place of `dtype` relative to 1.
double epsilonOf(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return std::ldexp(1.0, -7);
  case DType::F16:
    return std::ldexp(1.0, -10);
  default:
    return 1e-5;
  }
}

std::string backendAndCase(const Backend &backend, const std::string &op,
                           const Sample &sample, DType dtype) {
  return backend.name() + " " + op + " (" + sample.name + ") " +
         dtypeName(dtype);
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

TEST(ConformanceTest, EveryComputeRowHasSamples) {
  std::map<std::string, std::vector<Sample>> all = samples();
  for (const OpContract &contract : opContracts()) {
    if (!contract.collective) {
      EXPECT_TRUE(all.count(contract.name))
          << "row '" << contract.name << "' has no conformance sample";
    }
  }
  for (const auto &[op, list] : all)
    EXPECT_NE(findOpContract(op), nullptr) << "sample of no row: " << op;
}

class Conformance : public EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(Conformance);

TEST_P(Conformance, EveryRowMatchesTheReference) {
  StatusOr<std::unique_ptr<Device>> reference =
      (*findBackend("cpu"))->createDevice({2});
  ASSERT_TRUE(reference.ok());
  Launcher referenceLauncher(**reference);
  std::map<std::string, std::vector<Sample>> all = samples();
  int checked = 0;
  {
    const Backend *backend = *findBackend(GetParam());
    StatusOr<std::unique_ptr<Device>> device = backend->createDevice({2});
    ASSERT_TRUE(device.ok()) << device.status().message();
    Launcher launcher(**device);
    for (const auto &[op, list] : all) {
      const OpContract *contract = findOpContract(op);
      ASSERT_NE(contract, nullptr) << op;
      // The dtypes of the row's float operands: f32 only where it has
      // none (fill, positions) or they are all f32.
      bool takesSixteen = false;
      for (const OperandSpec &spec : contract->operands)
        takesSixteen |=
            spec.kind == OperandKind::Float || spec.kind == OperandKind::Any;
      std::vector<DType> dtypes = {DType::F32};
      if (takesSixteen)
        dtypes.insert(dtypes.end(), {DType::BF16, DType::F16});
      for (const Sample &sample : list) {
        for (DType dtype : dtypes) {
          std::string where = backendAndCase(*backend, op, sample, dtype);
          SCOPED_TRACE(where);
          // Operand and result types from the row's shape rule.
          std::vector<DType> types;
          std::vector<TensorType> operandTypes, referenceTypes;
          for (size_t i = 0; i < sample.operands.size(); ++i) {
            const OperandSpec &spec =
                contract->operands[contract->variadic ? 0 : i];
            DType type = operandType(spec.kind, dtype, sample.operands[i]);
            types.push_back(type);
            operandTypes.push_back({sample.operands[i].shape, type});
            referenceTypes.push_back(
                {sample.operands[i].shape,
                 type == DType::I32 ? DType::I32 : DType::F32});
          }
          std::vector<TensorType> resultTypes, referenceResults;
          Diagnostic invalid = inferResults(
              *contract, OpInstance(operandTypes, sample.attrs), resultTypes);
          ASSERT_FALSE(invalid) << *invalid;
          invalid =
              inferResults(*contract, OpInstance(referenceTypes, sample.attrs),
                           referenceResults);
          ASSERT_FALSE(invalid) << *invalid;
          std::vector<std::vector<float>> inputs =
              drawOperands(sample, types, 1 + checked);
          std::vector<std::vector<float>> initial;
          if (sample.outputsRead)
            for (const TensorType &result : resultTypes) {
              std::vector<float> values(
                  BufferDesc{result.shape, result.element}.numElements());
              for (size_t i = 0; i < values.size(); ++i)
                values[i] = roundTo(0.25f * (i % 7) - 0.75f, result.element);
              initial.push_back(std::move(values));
            }
          LaunchResult expected =
              referenceLauncher.run(op, referenceTypes, inputs,
                                    referenceResults, sample.attrs, initial);
          ASSERT_TRUE(expected.failure.empty()) << expected.failure;
          // A row the backend refuses fails here and the next ones are
          // still checked: one run names every row that differs.
          LaunchResult found = launcher.run(op, operandTypes, inputs,
                                            resultTypes, sample.attrs, initial);
          if (!found.failure.empty()) {
            ADD_FAILURE() << found.failure;
            continue;
          }
          LaunchResult again = launcher.run(op, operandTypes, inputs,
                                            resultTypes, sample.attrs, initial);
          if (!again.failure.empty()) {
            ADD_FAILURE() << again.failure;
            continue;
          }
          EXPECT_EQ(found.bits, again.bits) << "two runs differ";
          ASSERT_EQ(found.results.size(), expected.results.size());
          for (size_t r = 0; r < found.results.size(); ++r) {
            const std::vector<float> &want = expected.results[r];
            const std::vector<float> &got = found.results[r];
            ASSERT_EQ(got.size(), want.size()) << "result " << r;
            // Results in the run's dtype are within a few of its units in
            // the last place, measured against the result's scale (a
            // cancellation near zero is exact only in f32).
            double tolerance =
                resultTypes[r].element == DType::F32 && dtype == DType::F32
                    ? 1e-5
                    : 4 * epsilonOf(dtype);
            float scale = scaleOf(want);
            size_t mismatches = 0;
            for (size_t i = 0; i < got.size(); ++i) {
              bool close = std::fabs(got[i] - want[i]) <=
                           tolerance * (std::fabs(want[i]) + scale);
              bool sameNonFinite = !std::isfinite(want[i]) &&
                                   (std::isnan(want[i]) ? std::isnan(got[i])
                                                        : got[i] == want[i]);
              if (!close && !sameNonFinite && mismatches++ < 3)
                ADD_FAILURE()
                    << "result " << r << " element " << i << ": " << got[i]
                    << ", reference " << want[i] << " (scale " << scale << ")";
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

} // namespace
} // namespace trellis::runtime
