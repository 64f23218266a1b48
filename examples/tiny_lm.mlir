// A hand-written model in the graph op set: a one-layer MLP language model
// (embedding -> GELU MLP with a residual -> tied output projection).
// `trellis compile examples/tiny_lm.mlir -o lm.plan` differentiates @forward
// and adds AdamW; `trellis run lm.plan` trains it.
func.func @forward(
    %embed: tensor<64x32xf32> {graph.role = "param", graph.param = "embed.weight", graph.init = "normal:0.02"},
    %up: tensor<32x128xf32> {graph.role = "param", graph.param = "mlp.up.weight", graph.init = "normal:0.02"},
    %down: tensor<128x32xf32> {graph.role = "param", graph.param = "mlp.down.weight", graph.init = "normal:0.02"},
    %norm_w: tensor<32xf32> {graph.role = "param", graph.param = "norm.weight", graph.init = "ones"},
    %tokens: tensor<4x16xi32> {graph.role = "input", graph.param = "tokens"},
    %targets: tensor<4x16xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %x = graph.embedding %embed, %tokens : tensor<64x32xf32>, tensor<4x16xi32>
  %h = graph.matmul %x, %up : tensor<4x16x32xf32>, tensor<32x128xf32>
  %a = graph.gelu %h : tensor<4x16x128xf32>
  %d = graph.matmul %a, %down : tensor<4x16x128xf32>, tensor<128x32xf32>
  %r = graph.add %x, %d : tensor<4x16x32xf32>, tensor<4x16x32xf32>
  %n = graph.rms_norm %r, %norm_w eps 1.0e-5 : tensor<4x16x32xf32>, tensor<32xf32>
  %logits = graph.matmul %n, %embed transposed : tensor<4x16x32xf32>, tensor<64x32xf32>
  %loss = graph.cross_entropy %logits, %targets : tensor<4x16x64xf32>, tensor<4x16xi32>
  return %loss : tensor<f32>
}
