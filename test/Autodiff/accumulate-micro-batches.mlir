// RUN: trellis-opt %s -trellis-reverse-mode="loss-scale=0.25" -trellis-accumulate-micro-batches="micro-batches=4" | FileCheck %s --check-prefix=ACCUMULATE

// Tests that micro-batch accumulation declares the step's micro-batches, sums
// the loss and the gradient over them where the step reads them, and averages
// the loss; the backward is seeded with 1/m by reverse mode.
// ACCUMULATE-LABEL: func.func @gradients
// ACCUMULATE-SAME: attributes {graph.micro_batches = 4 : i64}
// ACCUMULATE: graph.fill 2.500000e-01 shape [] {graph.part = #graph.part<head>, graph.phase = "backward"}
// ACCUMULATE-DAG: %[[LOSS:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<head>} : tensor<f32>
// ACCUMULATE-DAG: %[[DW:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 0>} : tensor<4x3xf32>
// ACCUMULATE: %[[MEAN:.*]] = graph.scale %[[LOSS]] by 2.500000e-01
// ACCUMULATE: return %[[MEAN]], %[[DW]]
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
