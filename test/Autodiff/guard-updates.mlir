// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-guard-updates | FileCheck %s
// RUN: not trellis-opt %s -split-input-file -trellis-guard-updates='function=step' 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: expected a training step @step with optimizer updates to guard, found none

// Tests that every update reads one verdict: each gradient's elements
// summed (a scalar gradient is its own sum), the sums added, times zero,
// before the first update. Without a division the grad_scale is 1 plus the
// verdict; the step returns the verdict as its update_guard metric.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.updates = 1 : i64}, tensor<f32> {graph.metric = "update_guard"})
// CHECK: %[[SUM0:.*]] = graph.reduce_sum %arg2 dims [0, 1]
// CHECK: %[[TOTAL:.*]] = graph.add %[[SUM0]], %arg3
// CHECK: %[[ZERO:.*]] = graph.fill 0.000000e+00 shape []
// CHECK: %[[GUARD:.*]] = graph.mul %[[TOTAL]], %[[ZERO]]
// CHECK: %[[ONE:.*]] = graph.fill 1.000000e+00 shape []
// CHECK: %[[SCALE:.*]] = graph.add %[[ONE]], %[[GUARD]]
// CHECK: %[[W:.*]] = graph.sgd %arg0, %arg2 grad_scale %[[SCALE]]
// CHECK: %[[B:.*]] = graph.sgd %arg1, %arg3 grad_scale %[[SCALE]]
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

// Tests that a gradient divided by a scalar (the loss scale's unscale) is
// read undivided: the divisor plus the verdict is the update's grad_scale,
// and the division goes. The verdict sums the undivided gradients.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: graph.div
// CHECK: %[[SUM:.*]] = graph.reduce_sum %arg1 dims [0]
// CHECK: %[[ZERO:.*]] = graph.fill 0.000000e+00 shape []
// CHECK: %[[GUARD:.*]] = graph.mul %[[SUM]], %[[ZERO]]
// CHECK: %[[SCALE:.*]] = graph.add %arg5, %[[GUARD]]
// CHECK: graph.adamw %arg0, %arg1, %arg2, %arg3, %arg4 grad_scale %[[SCALE]] {
// CHECK-NOT: graph.div
func.func @train_step(%w: tensor<8xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>,
                      %step: tensor<f32>, %scale: tensor<f32> {graph.role = "loss_scale"},
                      %loss: tensor<f32>)
    -> (tensor<f32>, tensor<8xf32> {graph.updates = 0 : i64}) {
  %u = graph.div %g, %scale : tensor<8xf32>, tensor<f32>
  %p, %m1, %v1 = graph.adamw %w, %u, %m, %v, %step {learning_rate = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>
  return %loss, %p : tensor<f32>, tensor<8xf32>
}

// -----

// Tests that a step without optimizer updates is refused.
// expected-error @+1 {{expected optimizer updates to guard, found none}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests that an update with a grad_scale already is refused.
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<4xf32>, %scale: tensor<f32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32> {graph.updates = 0 : i64}) {
  // expected-error @+1 {{expected an update that takes a grad_scale and has none, found graph.sgd with 3 operands}}
  %0 = graph.sgd %w, %g grad_scale %scale {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
  return %loss, %0 : tensor<f32>, tensor<4xf32>
}

// -----

// Tests that a step that returns a verdict already is refused.
// expected-error @+1 {{expected a step without an update_guard result, found one (the step is guarded already)}}
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w"},
                      %g: tensor<4xf32>, %verdict: tensor<f32>)
    -> (tensor<4xf32> {graph.updates = 0 : i64}, tensor<f32> {graph.metric = "update_guard"}) {
  %0 = graph.sgd %w, %g {learning_rate = 1.0 : f64, weight_decay = 0.0 : f64} : tensor<4xf32>
  return %0, %verdict : tensor<4xf32>, tensor<f32>
}
