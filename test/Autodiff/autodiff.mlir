// RUN: trellis-opt %s -trellis-autodiff | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff=optimizer=none | FileCheck %s --check-prefix=GRADS
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd learning-rate=0.5" | FileCheck %s --check-prefix=SGD

// Tests that a forward pass becomes a training step: the loss seeds the
// backward pass, the matmul's weight gradient is x^T dy, and AdamW updates
// the parameter with explicit moment and step arguments.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32> {{{.*}}graph.role = "param"}, %[[X:.*]]: tensor<2x4xf32> {{{.*}}graph.role = "input"}, %[[M:.*]]: tensor<4x3xf32> {{{.*}}graph.role = "adam_m"}, %[[V:.*]]: tensor<4x3xf32> {{{.*}}graph.role = "adam_v"}, %[[STEP:.*]]: tensor<f32> {graph.role = "step"})
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<4x3xf32> {graph.updates = 2 : i64}, tensor<4x3xf32> {graph.updates = 3 : i64})
// CHECK: %[[Y:.*]] = graph.matmul %[[X]], %[[W]]
// CHECK: %[[LOSS:.*]] = graph.reduce_sum %[[Y]] dims [0, 1]
// CHECK: %[[SEED:.*]] = graph.fill 1.000000e+00 shape []
// CHECK: %[[KEPT:.*]] = graph.reshape %[[SEED]] to [1, 1]
// CHECK: %[[DY:.*]] = graph.broadcast_to %[[KEPT]] to [2, 3]
// The input's gradient is never used: it is not computed.
// CHECK-NOT: graph.matmul %[[DY]], %[[W]] transposed
// CHECK: %[[DW:.*]] = graph.matmul %[[X]] transposed, %[[DY]]
// CHECK: %[[P:.*]], %[[NM:.*]], %[[NV:.*]] = graph.adamw %[[W]], %[[DW]], %[[M]], %[[V]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.998{{[0-9]*}} : f64, epsilon = 1.000000e-08 : f64, learning_rate = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK: return %[[LOSS]], %[[P]], %[[NM]], %[[NV]]

// GRADS-LABEL: func.func @gradients
// GRADS-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
// GRADS-NOT: graph.adamw

// SGD-LABEL: func.func @train_step
// SGD: graph.sgd %{{.*}}, %{{.*}} {learning_rate = 5.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32>
  %loss = graph.reduce_sum %y dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}
