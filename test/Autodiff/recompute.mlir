// RUN: trellis-opt %s -trellis-autodiff="optimizer=none recompute=full" | FileCheck %s

// Tests that full recomputation works part by part: before the backward of each
// part (a run of ops of one graph.part), its forward is computed again from the
// part's inputs, and the gradient rules use the copies; the first forward's
// inner values (the matmul's result) feed nothing in the backward.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32> {{.*}}, %[[X:.*]]: tensor<2x4xf32> {{.*}})
// CHECK: %[[Y:.*]] = graph.matmul %[[X]], %[[W]]
// CHECK: %[[T:.*]] = graph.tanh %[[Y]]
// CHECK: %[[LOSS:.*]] = graph.reduce_sum %[[T]]
// The last part (the head) is not recomputed: its backward follows at
// once. The layer's matmul runs again, and tanh's gradient reads the copy;
// copies nothing reads (the tanh) are removed.
// CHECK: %[[Y2:.*]] = graph.matmul %[[X]], %[[W]]
// CHECK: %[[DY:.*]] = graph.unary_grad tanh %[[Y2]], %{{.*}}
// CHECK: %[[DW:.*]] = graph.matmul %[[X]] transposed, %[[DY]]
// CHECK: return %[[LOSS]], %[[DW]]
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
