// RUN: trellis-opt %s -trellis-reverse-mode | FileCheck %s

// Tests that the gradients of slices that tile a weight (GPT-2's q, k and v
// slices of its fused c_attn weight and bias) are joined into one
// concatenation, not padded to the weight's shape and added; slices that
// leave a gap, or overlap, keep their pads and adds.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x3x4xf32>
// CHECK-SAME: %[[B:[^:]*]]: tensor<4x5xf32>
// The second weight's slices skip its column 2: pads and an add.
// CHECK: graph.pad %{{.*}} low [0, 3] high [0, 0]
// CHECK-NEXT: graph.pad %{{.*}} low [0, 0] high [0, 3]
// CHECK-NEXT: %[[DB:.*]] = graph.add
// CHECK: %[[DV:.*]] = graph.reshape %{{.*}} to [4, 1, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK: %[[DK:.*]] = graph.reshape %{{.*}} to [4, 1, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK: %[[DQ:.*]] = graph.reshape %{{.*}} to [4, 1, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NEXT: %[[DW:.*]] = graph.concat %[[DQ]], %[[DK]], %[[DV]] dim 1 {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NOT: graph.pad
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
func.func @forward(%w: tensor<4x3x4xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %b: tensor<4x5xf32> {graph.role = "param", graph.param = "b", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %sq = graph.slice %w offsets [0, 0, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>} : tensor<4x3x4xf32>
  %sk = graph.slice %w offsets [0, 1, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>} : tensor<4x3x4xf32>
  %sv = graph.slice %w offsets [0, 2, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>} : tensor<4x3x4xf32>
  %wq = graph.reshape %sq to [4, 4] {graph.part = #graph.part<layer 0>} : tensor<4x1x4xf32>
  %wk = graph.reshape %sk to [4, 4] {graph.part = #graph.part<layer 0>} : tensor<4x1x4xf32>
  %wv = graph.reshape %sv to [4, 4] {graph.part = #graph.part<layer 0>} : tensor<4x1x4xf32>
  %q = graph.matmul %x, %wq {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x4xf32>
  %k = graph.matmul %x, %wk {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x4xf32>
  %v = graph.matmul %x, %wv {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x4xf32>
  %qk = graph.mul %q, %k {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<2x4xf32>
  %h = graph.mul %qk, %v {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<2x4xf32>
  %b0 = graph.slice %b offsets [0, 0] sizes [4, 2] {graph.part = #graph.part<layer 1>} : tensor<4x5xf32>
  %b1 = graph.slice %b offsets [0, 3] sizes [4, 2] {graph.part = #graph.part<layer 1>} : tensor<4x5xf32>
  %h0 = graph.matmul %h, %b0 {graph.part = #graph.part<layer 1>} : tensor<2x4xf32>, tensor<4x2xf32>
  %h1 = graph.matmul %h, %b1 {graph.part = #graph.part<layer 1>} : tensor<2x4xf32>, tensor<4x2xf32>
  %o = graph.add %h0, %h1 {graph.part = #graph.part<layer 1>} : tensor<2x2xf32>, tensor<2x2xf32>
  %loss = graph.reduce_sum %o dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x2xf32>
  return %loss : tensor<f32>
}
