// RUN: trellis-opt %s -trellis-reverse-mode -trellis-recompute | FileCheck %s --check-prefix=RECOMPUTE

// Tests that recomputation puts the layer's forward again right before its
// backward, read by the backward (and, like the backward it feeds, only there
// for the weight's gradient: phase "weight"); the head (last part) is not
// recomputed.
// RECOMPUTE-LABEL: func.func @gradients
// RECOMPUTE: %[[Y:.*]] = graph.matmul {{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// RECOMPUTE: %[[Y2:.*]] = graph.matmul {{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// RECOMPUTE-NOT: %[[Y]]
// RECOMPUTE: graph.unary_grad tanh %[[Y2]]
// RECOMPUTE: return
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
