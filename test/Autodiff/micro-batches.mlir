// RUN: trellis-opt %s -trellis-autodiff="optimizer=none micro-batches=2" | FileCheck %s
// RUN: not trellis-opt %s -trellis-autodiff="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// Tests gradient accumulation: with 2 micro-batches the step takes the
// input twice (x.0, x.1), runs forward then backward of each in turn with
// the seed 1/2, sums the weight gradients, and returns the mean loss.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32> {{{.*}}graph.role = "param"}, %[[X0:.*]]: tensor<2x4xf32> {graph.param = "x.0", graph.role = "input"}, %[[X1:.*]]: tensor<2x4xf32> {graph.param = "x.1", graph.role = "input"})
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
// CHECK: %[[Y0:.*]] = graph.matmul %[[X0]], %[[W]]
// CHECK: %[[L0:.*]] = graph.reduce_sum %[[Y0]]
// CHECK: graph.fill 5.000000e-01 shape []
// CHECK: %[[DW0:.*]] = graph.matmul %[[X0]] transposed
// CHECK: %[[Y1:.*]] = graph.matmul %[[X1]], %[[W]]
// CHECK: %[[L1:.*]] = graph.reduce_sum %[[Y1]]
// CHECK: graph.fill 5.000000e-01 shape []
// CHECK: %[[DW1:.*]] = graph.matmul %[[X1]] transposed
// CHECK: %[[DW:.*]] = graph.add %[[DW0]], %[[DW1]]
// CHECK: %[[SUM:.*]] = graph.add %[[L0]], %[[L1]]
// CHECK: %[[HALF:.*]] = graph.fill 5.000000e-01 shape []
// CHECK: %[[LOSS:.*]] = graph.mul %[[SUM]], %[[HALF]]
// CHECK: return %[[LOSS]], %[[DW]]

// ZERO: error: expected micro-batches >= 1, found 0
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32>
  %loss = graph.reduce_sum %y dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}
