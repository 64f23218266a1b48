// RUN: trellis-opt %s -trellis-fuse-elementwise -split-input-file | FileCheck %s

// Tests that a bias add feeding GELU becomes one op over the matmul's output
// and the bias (broadcast), the sum never stored.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.fused_elementwise %[[X]], %[[B]] ["add %0 %1", "gelu_tanh %2"] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @bias_gelu(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = graph.add %x, %b : tensor<4x8xf32>, tensor<8xf32>
  %1 = graph.gelu_tanh %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Tests that a tree (GELU's backward times a scale, plus a residual gradient)
// becomes one op: inputs numbered in order of first use, slots after them in
// member order.
// CHECK-LABEL: func.func @tree
// CHECK-NEXT: graph.fused_elementwise %arg0, %arg1, %arg2 ["unary_grad gelu_tanh %0 %1", "scale %3 0.5", "add %4 %2"]
// CHECK-NEXT: return
func.func @tree(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.unary_grad gelu_tanh %x, %dy : tensor<4x8xf32>
  %1 = graph.scale %0 by 0.5 : tensor<4x8xf32>
  %2 = graph.add %1, %r : tensor<4x8xf32>, tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Tests that a value read twice (the forward's pre-activation, which the
// backward reads again) stays a tensor: it ends the tree. A lone op is left
// alone.
// CHECK-LABEL: func.func @shared
// CHECK-NEXT: %[[S:.*]] = graph.add
// CHECK-NEXT: %[[G:.*]] = graph.gelu_tanh %[[S]]
// CHECK-NEXT: %[[D:.*]] = graph.fused_elementwise %[[S]], %arg2 ["unary_grad gelu_tanh %0 %1", "neg %2"]
// CHECK-NEXT: return %[[G]], %[[D]]
func.func @shared(%x: tensor<4x8xf32>, %b: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = graph.add %x, %b : tensor<4x8xf32>, tensor<4x8xf32>
  %1 = graph.gelu_tanh %0 : tensor<4x8xf32>
  %2 = graph.unary_grad gelu_tanh %0, %dy : tensor<4x8xf32>
  %3 = graph.neg %2 : tensor<4x8xf32>
  return %1, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that casts join (each slot keeps its member's dtype: the program rounds
// as the members would), and that a member of another shape (the broadcast
// operand's own computation) or another program stays out.
// CHECK-LABEL: func.func @casts_and_boundaries
// CHECK-NEXT: %[[SB:.*]] = graph.scale %arg1 by 2.000000e+00 : tensor<8xf32>
// CHECK-NEXT: %[[F:.*]] = graph.fused_elementwise %arg0, %[[SB]] ["cast f32 %0", "add %2 %1", "cast bf16 %3"] {graph.phase = "forward"} : (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: %[[W:.*]] = graph.exp %[[F]] {graph.phase = "weight"}
func.func @casts_and_boundaries(%x: tensor<4x8xbf16>, %b: tensor<8xf32>) -> tensor<4x8xbf16> {
  %0 = graph.cast %x to "f32" {graph.phase = "forward"} : tensor<4x8xbf16>
  %sb = graph.scale %b by 2.0 : tensor<8xf32>
  %1 = graph.add %0, %sb {graph.phase = "forward"} : tensor<4x8xf32>, tensor<8xf32>
  %2 = graph.cast %1 to "bf16" {graph.phase = "forward"} : tensor<4x8xf32>
  %3 = graph.exp %2 {graph.phase = "weight"} : tensor<4x8xbf16>
  return %3 : tensor<4x8xbf16>
}
