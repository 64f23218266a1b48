// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-guard-updates | FileCheck %s
// RUN: not trellis-opt %s -split-input-file -trellis-guard-updates='function=step' 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: expected a training step @step with optimizer updates to guard, found none

// Tests that every update reads one guard: each gradient's elements summed
// (a scalar gradient is its own sum), the sums added, times zero, before
// the first update; the step returns it as its update_guard metric.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.updates = 1 : i64}, tensor<f32> {graph.metric = "update_guard"})
// CHECK: %[[SUM0:.*]] = graph.reduce_sum %arg2 dims [0, 1]
// CHECK: %[[TOTAL:.*]] = graph.add %[[SUM0]], %arg3
// CHECK: %[[ZERO:.*]] = graph.fill 0.000000e+00 shape []
// CHECK: %[[GUARD:.*]] = graph.mul %[[TOTAL]], %[[ZERO]]
// CHECK: %[[W:.*]] = graph.sgd %arg0, %arg2 guard %[[GUARD]]
// CHECK: %[[B:.*]] = graph.sgd %arg1, %arg3 guard %[[GUARD]]
// CHECK: return %arg4, %[[W]], %[[B]], %[[GUARD]]
func.func @train_step(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w"},
                      %b: tensor<f32> {graph.role = "param", graph.param = "b"},
                      %gw: tensor<4x3xf32>, %gb: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.updates = 1 : i64}) {
  %0 = graph.sgd %w, %gw {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4x3xf32>
  %1 = graph.sgd %b, %gb {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<f32>
  return %loss, %0, %1 : tensor<f32>, tensor<4x3xf32>, tensor<f32>
}

// -----

// Tests that AdamW's guard follows its step count.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[SUM:.*]] = graph.reduce_sum %arg1 dims [0]
// CHECK: %[[ZERO:.*]] = graph.fill 0.000000e+00 shape []
// CHECK: %[[GUARD:.*]] = graph.mul %[[SUM]], %[[ZERO]]
// CHECK: graph.adamw %arg0, %arg1, %arg2, %arg3, %arg4 guard %[[GUARD]] {
func.func @train_step(%w: tensor<8xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>,
                      %step: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<8xf32> {graph.updates = 0 : i64}) {
  %p, %m1, %v1 = graph.adamw %w, %g, %m, %v, %step {learning_rate = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>
  return %loss, %p : tensor<f32>, tensor<8xf32>
}

// -----

// Tests that a step without optimizer updates is refused.
// expected-error @+1 {{expected optimizer updates to guard, found none}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests that a step guarded already is refused (a second guard would
// replace the first).
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<4xf32>, %guard: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32> {graph.updates = 0 : i64}) {
  // expected-error @+1 {{expected an update without a guard, found one (the step is guarded already)}}
  %0 = graph.sgd %w, %g guard %guard {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
  return %loss, %0 : tensor<f32>, tensor<4xf32>
}
