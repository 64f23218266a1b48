// RUN: trellis-opt %s -trellis-reverse-mode | FileCheck %s --check-prefix=REVERSE

// Tests that reverse mode alone writes @gradients: it holds the forward and the
// backward of one micro-batch, every op marked with its phase and part, the
// seed 1 (loss-scale), the gradient returned with its argument. The layer's
// backward only makes its weight's gradient (the data input's is dead): phase
// "weight".
// REVERSE-LABEL: func.func @gradients
// REVERSE-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
// REVERSE-NOT: graph.micro_batches
// REVERSE: %[[Y:.*]] = graph.matmul %{{.*}}, %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// REVERSE: %[[T:.*]] = graph.tanh %[[Y]] {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// REVERSE: graph.fill 1.000000e+00 shape [] {graph.part = #graph.part<head>, graph.phase = "backward"}
// REVERSE: graph.unary_grad tanh %[[Y]], %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// REVERSE: %[[DW:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// REVERSE: return %{{.*}}, %[[DW]]
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
