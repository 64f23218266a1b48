// RUN: trellis-opt %s -trellis-autodiff="optimizer=none micro-batches=2" | FileCheck %s
// RUN: not trellis-opt %s -trellis-autodiff="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// Tests that gradients accumulate over micro-batches: with 2 micro-batches the
// step is written once over one micro-batch (the input holds one, the function
// declares graph.micro_batches = 2), its forward and backward marked with their
// phase and seeded with 1/2; the loss and the weight gradient reach the step
// through graph.microbatch_sum, and the loss is their mean. No op is repeated
// per micro-batch.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32> {{{.*}}graph.role = "param"}, %[[X:.*]]: tensor<2x4xf32> {graph.param = "x", graph.role = "input"})
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
// CHECK-SAME: attributes {graph.micro_batches = 2 : i64}
// CHECK: %[[Y:.*]] = graph.matmul %[[X]], %[[W]] {graph.phase = "forward"}
// CHECK: %[[L:.*]] = graph.reduce_sum %[[Y]] dims [0, 1] {graph.phase = "forward"}
// CHECK: graph.fill 5.000000e-01 shape [] {graph.phase = "backward"}
// CHECK: %[[DW:.*]] = graph.matmul %[[X]] transposed, %{{.*}} {graph.phase = "backward"}
// CHECK-NOT: graph.matmul
// CHECK-DAG: %[[TOTAL:.*]] = graph.microbatch_sum %[[DW]] : tensor<4x3xf32>
// CHECK-DAG: %[[SUM:.*]] = graph.microbatch_sum %[[L]] : tensor<f32>
// CHECK: %[[LOSS:.*]] = graph.scale %[[SUM]] by 5.000000e-01 : tensor<f32>
// CHECK: return %[[LOSS]], %[[TOTAL]]

// ZERO: error: expected micro-batches >= 1, found 0
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32>
  %loss = graph.reduce_sum %y dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}
