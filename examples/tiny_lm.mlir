// A hand-written model in the graph op set: a two-layer MLP language model
// (embedding -> two GELU MLPs with residuals -> RMS norm -> tied output
// projection). Every op declares its model part (graph.part), so the model
// can be pipelined like an imported one: the embedding on the first stage,
// the head (norm, logits, loss) on the last.
// `trellis compile examples/tiny_lm.mlir -o lm.plan` differentiates @forward
// and adds AdamW; `trellis run lm.plan` trains it;
// `trellis compile examples/tiny_lm.mlir --pp 2 --microbatches 2` pipelines it.
func.func @forward(
    %embed: tensor<64x32xf32> {graph.role = "param", graph.param = "embed.weight", graph.init = "normal:0.02"},
    %up0: tensor<32x128xf32> {graph.role = "param", graph.param = "layers.0.up.weight", graph.init = "normal:0.02"},
    %down0: tensor<128x32xf32> {graph.role = "param", graph.param = "layers.0.down.weight", graph.init = "normal:0.02"},
    %up1: tensor<32x128xf32> {graph.role = "param", graph.param = "layers.1.up.weight", graph.init = "normal:0.02"},
    %down1: tensor<128x32xf32> {graph.role = "param", graph.param = "layers.1.down.weight", graph.init = "normal:0.02"},
    %norm_w: tensor<32xf32> {graph.role = "param", graph.param = "norm.weight", graph.init = "ones"},
    %tokens: tensor<4x16xi32> {graph.role = "input", graph.param = "tokens"},
    %targets: tensor<4x16xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %x = graph.embedding %embed, %tokens {graph.part = #graph.part<embedding>} : tensor<64x32xf32>, tensor<4x16xi32>

  %h0 = graph.matmul %x, %up0 {graph.part = #graph.part<layer 0>} : tensor<4x16x32xf32>, tensor<32x128xf32>
  %a0 = graph.gelu %h0 {graph.part = #graph.part<layer 0>} : tensor<4x16x128xf32>
  %d0 = graph.matmul %a0, %down0 {graph.part = #graph.part<layer 0>} : tensor<4x16x128xf32>, tensor<128x32xf32>
  %r0 = graph.add %x, %d0 {graph.part = #graph.part<layer 0>} : tensor<4x16x32xf32>, tensor<4x16x32xf32>

  %h1 = graph.matmul %r0, %up1 {graph.part = #graph.part<layer 1>} : tensor<4x16x32xf32>, tensor<32x128xf32>
  %a1 = graph.gelu %h1 {graph.part = #graph.part<layer 1>} : tensor<4x16x128xf32>
  %d1 = graph.matmul %a1, %down1 {graph.part = #graph.part<layer 1>} : tensor<4x16x128xf32>, tensor<128x32xf32>
  %r1 = graph.add %r0, %d1 {graph.part = #graph.part<layer 1>} : tensor<4x16x32xf32>, tensor<4x16x32xf32>

  %n = graph.rms_norm %r1, %norm_w eps 1.0e-5 {graph.part = #graph.part<head>} : tensor<4x16x32xf32>, tensor<32xf32>
  %logits = graph.matmul %n, %embed transposed {graph.part = #graph.part<head>} : tensor<4x16x32xf32>, tensor<64x32xf32>
  %loss = graph.cross_entropy %logits, %targets {graph.part = #graph.part<head>} : tensor<4x16x64xf32>, tensor<4x16xi32>
  return %loss : tensor<f32>
}
