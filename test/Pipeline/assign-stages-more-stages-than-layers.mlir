// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true" -trellis-assign-stages="stages=4" -verify-diagnostics

// Tests that a pipeline of more virtual stages than the model has layers is rejected.
// expected-error @+1 {{expected at least one layer per pipeline stage: 4 stages, but the model has 2 layers}}
func.func @forward(
    %embed: tensor<16x8xf32> {graph.role = "param", graph.param = "embed", graph.init = "normal:0.02"},
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %tokens: tensor<2x4xi32> {graph.role = "input", graph.param = "tokens"},
    %targets: tensor<2x4xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %x = graph.embedding %embed, %tokens {graph.part = #graph.part<embedding>} : tensor<16x8xf32>, tensor<2x4xi32>
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %a0 = graph.tanh %h0 {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>
  %h1 = graph.matmul %a0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %logits = graph.matmul %h1, %embed transposed {graph.part = #graph.part<head>} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss = graph.cross_entropy %logits, %targets {graph.part = #graph.part<head>} : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
