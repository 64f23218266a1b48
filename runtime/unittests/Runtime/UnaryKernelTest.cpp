//===- UnaryKernelTest.cpp - Vectorized pointwise functions' accuracy -----===//
//
// Unary ops and unary_grad (oneDNN's eltwise where it has the function,
// the scalar loops for log) against the C library's functions in double.
// The bound, relative to max(|value|, 0.01): 3e-5 for values and
// gradients (1e-4 for gelu_tanh's, whose reference is a central
// difference); fp32 evaluation of the same formulas (the scalar path)
// errs by up to 1e-5 there too, from cancellation in 1 - tanh^2 and
// 0.5 x (1 + tanh). An element's result does not depend on where it sits
// in its tensor or on the tensor's length: a piece of a split tensor gets
// exactly the values the whole gets (multi-rank runs equal one-rank runs).
//
//===----------------------------------------------------------------------===//

#include "KernelTesting.h"

#include "trellis/Runtime/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace trellis;
using namespace trellis::runtime;

namespace {

struct Function {
  const char *name;
  std::function<double(double)> value, derivative;
  double low, high;
};

double geluTanh(double x) {
  return 0.5 * x *
         (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

const std::vector<Function> &functions() {
  static const std::vector<Function> all = {
      {"exp", [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }, -20, 20},
      {"log", [](double x) { return std::log(x); },
       [](double x) { return 1 / x; }, 0.01, 100},
      {"tanh", [](double x) { return std::tanh(x); },
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, -8, 8},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); },
       [](double x) {
         double s = 1 / (1 + std::exp(-x));
         return s * (1 - s);
       },
       -20, 20},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); },
       [](double x) {
         double s = 1 / (1 + std::exp(-x));
         return s * (1 + x * (1 - s));
       },
       -20, 20},
      {"gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
       [](double x) {
         return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
       },
       -8, 8},
      {"gelu_tanh", geluTanh,
       [](double x) {
         double h = 1e-4;
         return (geluTanh(x + h) - geluTanh(x - h)) / (2 * h);
       },
       -8, 8},
      {"sqrt", [](double x) { return std::sqrt(x); },
       [](double x) { return 0.5 / std::sqrt(x); }, 0.01, 100},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); },
       [](double x) { return -0.5 / (x * std::sqrt(x)); }, 0.01, 100},
      {"relu", [](double x) { return x > 0 ? x : 0; },
       [](double x) { return x > 0 ? 1 : 0; }, -4, 4},
      {"neg", [](double x) { return -x; }, [](double) { return -1.0; }, -4,
       4}};
  return all;
}

void runOp(Device &device, const std::string &op, const std::string &function,
           const std::vector<float> &x, const std::vector<float> &dy,
           std::vector<float> &y) {
  int64_t n = x.size();
  std::vector<std::unique_ptr<DeviceAllocation>> memory;
  std::vector<Tensor> tensors;
  for (int i = 0; i < 3; ++i) {
    memory.push_back(std::move(*device.allocate(n * 4)));
    tensors.emplace_back(BufferDesc{{n}, DType::F32}, memory.back()->data());
  }
  ASSERT_TRUE(device.copyFromHost(x.data(), tensors[0]).ok());
  ASSERT_TRUE(device.copyFromHost(dy.data(), tensors[1]).ok());
  Instruction instruction;
  instruction.op = op;
  bool gradient = op == "unary_grad";
  instruction.inputs = gradient ? std::vector<int64_t>{0, 1}
                                : std::vector<int64_t>{0};
  instruction.outputs = {2};
  if (gradient) {
    AttrValue name;
    name.kind = AttrValue::Kind::String;
    name.text = function;
    instruction.attrs["function"] = name;
  }
  AxisList axes;
  Status status = device.launch(KernelArgs{instruction, tensors, axes});
  ASSERT_TRUE(status.ok()) << status.message();
  y.resize(n);
  ASSERT_TRUE(device.copyToHost(tensors[2], y.data()).ok());
}

class UnaryKernelTest : public runtime::testing::EveryBackend {};
TRELLIS_ON_EVERY_BACKEND(UnaryKernelTest);

TEST_P(UnaryKernelTest, FunctionsMatchTheCLibraryAtEveryLength) {
  std::unique_ptr<Device> device =
      std::move(*(*findBackend(GetParam()))->createDevice({}));
  for (const Function &f : functions()) {
    int64_t n = 100003;
    std::vector<float> x(n), dy(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(f.low + (f.high - f.low) * i / (n - 1));
      dy[i] = 0.5f + static_cast<float>(i % 7) / 7.0f;
    }
    std::vector<float> y, dx;
    runOp(*device, f.name, f.name, x, dy, y);
    runOp(*device, "unary_grad", f.name, x, dy, dx);
    bool tanhGrad = std::string(f.name) == "gelu_tanh";
    for (int64_t i = 0; i < n; ++i) {
      double value = f.value(x[i]);
      ASSERT_LE(std::abs(y[i] - value), 3e-5 * std::max(std::abs(value), 0.01))
          << f.name << "(" << x[i] << ") = " << value << ", found " << y[i];
      if (std::string(f.name) == "relu" && x[i] == 0)
        continue;
      double grad = f.derivative(x[i]) * dy[i];
      ASSERT_LE(std::abs(dx[i] - grad),
                (tanhGrad ? 1e-4 : 3e-5) * std::max(std::abs(grad), 0.01))
          << f.name << "'(" << x[i] << ") dy = " << grad << ", found "
          << dx[i];
    }
    // A piece (odd offset and length, as a split tensor's) gets the
    // whole's values bit for bit.
    std::vector<float> piece(x.begin() + 37, x.begin() + 37 + 1001),
        pieceDy(dy.begin() + 37, dy.begin() + 37 + 1001), py, pdx;
    runOp(*device, f.name, f.name, piece, pieceDy, py);
    runOp(*device, "unary_grad", f.name, piece, pieceDy, pdx);
    for (size_t i = 0; i < piece.size(); ++i) {
      ASSERT_EQ(py[i], y[37 + i]) << f.name << " at " << i;
      ASSERT_EQ(pdx[i], dx[37 + i]) << f.name << "' at " << i;
    }
  }
}

} // namespace
