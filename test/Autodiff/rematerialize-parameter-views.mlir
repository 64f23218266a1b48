// RUN: trellis-opt %s -trellis-reverse-mode -trellis-rematerialize-parameter-views | FileCheck %s
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-recompute -trellis-rematerialize-parameter-views | FileCheck %s --check-prefix=RECOMPUTE

// Tests that the backward reads a weight's view (a slice of a fused weight,
// reshaped) made again from the weight right before its first reader, one
// copy per model part and phase (here the weight phase: %x is a parameter
// too), while the forward keeps its own; views of activations are left
// alone. Under full recomputation the backward reads
// the recomputed forward's views already: nothing to do.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x2x4xf32>
// CHECK: %[[S:.*]] = graph.slice %[[W]] offsets [0, 1, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK: %[[WQ:.*]] = graph.reshape %[[S]] to [4, 4] {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK: graph.matmul %{{.*}}, %[[WQ]] {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK: %[[S2:.*]] = graph.slice %[[W]] offsets [0, 1, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NEXT: %[[WQ2:.*]] = graph.reshape %[[S2]] to [4, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NEXT: graph.matmul %{{.*}}, %[[WQ2]] transposed {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NOT: graph.slice %[[W]]

// RECOMPUTE-LABEL: func.func @gradients
// RECOMPUTE-COUNT-2: graph.slice
// RECOMPUTE-NOT: graph.slice
func.func @forward(%w: tensor<4x2x4xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"}) -> tensor<f32> {
  %s = graph.slice %w offsets [0, 1, 0] sizes [4, 1, 4] {graph.part = #graph.part<layer 0>} : tensor<4x2x4xf32>
  %wq = graph.reshape %s to [4, 4] {graph.part = #graph.part<layer 0>} : tensor<4x1x4xf32>
  %y = graph.matmul %x, %wq {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x4xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>
  %r = graph.reshape %t to [8] {graph.part = #graph.part<layer 1>} : tensor<2x4xf32>
  %e = graph.exp %r {graph.part = #graph.part<layer 1>} : tensor<8xf32>
  %loss = graph.reduce_sum %e dims [0] {graph.part = #graph.part<head>} : tensor<8xf32>
  return %loss : tensor<f32>
}
