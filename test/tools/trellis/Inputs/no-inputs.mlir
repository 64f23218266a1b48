// A training step with no token inputs: nothing for trellis run to feed.
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> (tensor<f32>, tensor<4xf32> {graph.updates = 0 : i64}) {
  %loss = graph.reduce_sum %w dims [0] : tensor<4xf32>
  %new = graph.scale %w by 0.5 : tensor<4xf32>
  return %loss, %new : tensor<f32>, tensor<4xf32>
}
