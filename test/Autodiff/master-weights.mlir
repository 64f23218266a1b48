// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-master-weights | FileCheck %s

// Tests that a parameter read only through casts to bf16 (one per model
// part) becomes a bf16 argument read directly, its update goes to a new
// f32 master argument (same name, init and attributes, role master), and
// the step returns the master's cast as the new parameter and the master
// itself. A parameter an f32 op reads directly stays f32, and so does its
// update.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<4x3xbf16> {graph.init = "normal:0.02", graph.param = "w", graph.role = "param"}
// CHECK-SAME: %arg1: tensor<3xf32> {graph.init = "zeros", graph.param = "b", graph.role = "param"}
// CHECK-SAME: %arg3: tensor<4x3xf32> {graph.init = "normal:0.02", graph.param = "w", graph.role = "master"})
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xbf16> {graph.updates = 0 : i64}, tensor<3xf32> {graph.updates = 1 : i64}, tensor<4x3xf32> {graph.updates = 3 : i64})
// CHECK-NOT: graph.cast %arg0
// CHECK: %[[X:.*]] = graph.cast %arg2 to "bf16"
// CHECK: %[[Y:.*]] = graph.matmul %[[X]], %arg0 {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x4xbf16>, tensor<4x3xbf16>
// CHECK: graph.matmul %[[X]], %arg0 {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x4xbf16>, tensor<4x3xbf16>
// CHECK: graph.add %{{.*}}, %arg1 {{.*}}: tensor<2x3xf32>, tensor<3xf32>
// CHECK: %[[NEW:.*]] = graph.sgd %arg3, %{{.*}} {{.*}}graph.part = #graph.part<layer 0>
// CHECK: %[[NEWB:.*]] = graph.sgd %arg1,
// CHECK: %[[NEW16:.*]] = graph.cast %[[NEW]] to "bf16" {graph.part = #graph.part<layer 0>} : tensor<4x3xf32>
// CHECK: return %{{.*}}, %[[NEW16]], %[[NEWB]], %[[NEW]] : tensor<f32>, tensor<4x3xbf16>, tensor<3xf32>, tensor<4x3xf32>
module {
  func.func @train_step(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                        %b: tensor<3xf32> {graph.role = "param", graph.param = "b", graph.init = "zeros"},
                        %x: tensor<2x4xf32> {graph.role = "input", graph.param = "tokens"})
      -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, tensor<3xf32> {graph.updates = 1 : i64}) {
    %w0 = graph.cast %w to "bf16" {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<4x3xf32>
    %x16 = graph.cast %x to "bf16" {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x4xf32>
    %y = graph.matmul %x16, %w0 {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x4xbf16>, tensor<4x3xbf16>
    %w1 = graph.cast %w to "bf16" {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<4x3xf32>
    %z = graph.matmul %x16, %w1 {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x4xbf16>, tensor<4x3xbf16>
    %s = graph.add %y, %z {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x3xbf16>, tensor<2x3xbf16>
    %s32 = graph.cast %s to "f32" {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x3xbf16>
    %t = graph.add %s32, %b {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x3xf32>, tensor<3xf32>
    %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x3xf32>
    %gw = graph.fill 1.0 shape [4, 3] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
    %gb = graph.fill 1.0 shape [3] {graph.part = #graph.part<head>, graph.phase = "weight"}
    %nw = graph.sgd %w, %gw {learning_rate = 0.1 : f64, weight_decay = 0.0 : f64, graph.part = #graph.part<layer 0>} : tensor<4x3xf32>
    %nb = graph.sgd %b, %gb {learning_rate = 0.1 : f64, weight_decay = 0.0 : f64} : tensor<3xf32>
    return %loss, %nw, %nb : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>
  }
}

// -----

// Tests that a step needs a @train_step.
// expected-error @+1 {{expected a training step @train_step to keep master weights of, found none}}
module {
  func.func @gradients(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<f32> {
    %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
    return %l : tensor<f32>
  }
}
