// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-clip-gradients='max-norm=0.5' | FileCheck %s
// RUN: not trellis-opt %s -split-input-file -trellis-clip-gradients='max-norm=-1' 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not trellis-opt %s -split-input-file -trellis-clip-gradients='function=step' 2>&1 | FileCheck %s --check-prefix=MISSING
// NEGATIVE: error: --clip-grad: expected a finite number > 0, found -1
// MISSING: error: --clip-grad: expected a training step @step with optimizer updates, found none

// Tests that the gradients of every update are scaled by one factor from
// their global norm: the sum of each gradient's squares (a scalar's square
// needs no reduction), their sum's square root, and max-norm / max(norm +
// 1e-6, max-norm); the updates read the scaled gradients, and the step
// returns the norm as its grad_norm metric.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.updates = 1 : i64}, tensor<f32> {graph.metric = "grad_norm", graph.report = {label = "grad norm", summary = "value"}})
// CHECK: %[[SQ0:.*]] = graph.mul %arg2, %arg2
// CHECK: %[[SUM0:.*]] = graph.reduce_sum %[[SQ0]] dims [0, 1]
// CHECK: %[[SQ1:.*]] = graph.mul %arg3, %arg3
// CHECK: %[[TOTAL:.*]] = graph.add %[[SUM0]], %[[SQ1]]
// CHECK: %[[NORM:.*]] = graph.sqrt %[[TOTAL]]
// CHECK: %[[LIMIT:.*]] = graph.fill 5.000000e-01 shape []
// CHECK: %[[EPS:.*]] = graph.fill 9.9999999999999995E-7 shape []
// CHECK: %[[PADDED:.*]] = graph.add %[[NORM]], %[[EPS]]
// CHECK: %[[BOUND:.*]] = graph.maximum %[[PADDED]], %[[LIMIT]]
// CHECK: %[[SCALE:.*]] = graph.div %[[LIMIT]], %[[BOUND]]
// CHECK: %[[G0:.*]] = graph.mul %arg2, %[[SCALE]]
// CHECK: %[[W:.*]] = graph.sgd %arg0, %[[G0]]
// CHECK: %[[G1:.*]] = graph.mul %arg3, %[[SCALE]]
// CHECK: %[[B:.*]] = graph.sgd %arg1, %[[G1]]
// CHECK: return %arg4, %[[W]], %[[B]], %[[NORM]]
func.func @train_step(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w"},
                      %b: tensor<f32> {graph.role = "param", graph.param = "b"},
                      %gw: tensor<4x3xf32>, %gb: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.updates = 1 : i64}) {
  %0 = graph.sgd %w, %gw {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4x3xf32>
  %1 = graph.sgd %b, %gb {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<f32>
  return %loss, %0, %1 : tensor<f32>, tensor<4x3xf32>, tensor<f32>
}

// -----

// Tests that an update that divides its gradient by a grad_scale s sees a
// sum of squares s^2 smaller: the norm is that of the gradients it reads.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[SQ:.*]] = graph.mul %arg1, %arg1
// CHECK: %[[SUM:.*]] = graph.reduce_sum %[[SQ]] dims [0]
// CHECK: %[[S2:.*]] = graph.mul %arg2, %arg2
// CHECK: %[[UNSCALED:.*]] = graph.div %[[SUM]], %[[S2]]
// CHECK: %[[NORM:.*]] = graph.sqrt %[[UNSCALED]]
// CHECK: %[[G:.*]] = graph.mul %arg1, %{{.*}}
// CHECK: graph.sgd %arg0, %[[G]] grad_scale %arg2
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<4xf32>, %s: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32> {graph.updates = 0 : i64}) {
  %0 = graph.sgd %w, %g grad_scale %s {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
  return %loss, %0 : tensor<f32>, tensor<4xf32>
}

// -----

// Tests that a step without optimizer updates is refused.
// expected-error @+1 {{--clip-grad: expected optimizer updates to clip the gradients of, found none}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
