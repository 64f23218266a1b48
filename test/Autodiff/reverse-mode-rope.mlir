// RUN: trellis-opt %s -trellis-reverse-mode | FileCheck %s

// Tests that a rotary embedding's gradient is the inverse rotation with the
// forward's pairing: the interleaved pairs (2i, 2i + 1) stay interleaved.
// CHECK-LABEL: func.func @gradients
// CHECK: graph.rope %{{.*}} frequencies [1.000000e+00, 1.000000e-02] {graph.part = #graph.part<layer 0>, graph.phase = "forward", interleaved}
// CHECK: graph.rope %{{.*}} frequencies [1.000000e+00, 1.000000e-02] {graph.part = #graph.part<layer 0>, graph.phase = "{{.*}}", interleaved, inverse = true}
func.func @forward(%w: tensor<2x4x2x4xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<f32> {
  %r = graph.rope %w frequencies [1.0, 0.01] {interleaved, graph.part = #graph.part<layer 0>} : tensor<2x4x2x4xf32>
  %t = graph.tanh %r {graph.part = #graph.part<layer 0>} : tensor<2x4x2x4xf32>
  %loss = graph.reduce_sum %t dims [0, 1, 2, 3] {graph.part = #graph.part<head>} : tensor<2x4x2x4xf32>
  return %loss : tensor<f32>
}
