// Tokens and targets of different shapes.
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"},
    %tokens: tensor<2x4xi32> {graph.role = "input", graph.param = "tokens"},
    %targets: tensor<2x3xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %loss = graph.reduce_sum %w dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
