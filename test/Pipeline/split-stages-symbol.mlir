// RUN: not trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true optimizer=sgd" -trellis-assign-stages="stages=2 layers=1,1" -trellis-split-stages 2>&1 | FileCheck %s

// Tests that splitting does not overwrite a symbol of the name it gives the
// pipeline's mesh.
// CHECK: error: a symbol @pipeline exists already
trellis.mesh @pipeline = <["pp"=2]>
func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
