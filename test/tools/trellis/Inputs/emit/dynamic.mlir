// A step with an argument of dynamic size (no op reads it, so no op's
// verifier sees it first).
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}, %v: tensor<?xf32> {graph.role = "param", graph.param = "v", graph.init = "ones"}) -> tensor<f32> {
  %loss = graph.reduce_sum %w dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
