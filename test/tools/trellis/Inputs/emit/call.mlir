// A step that calls a function: the plan has no calls.
func.func private @helper(tensor<4xf32>) -> tensor<f32>
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32> {
  %loss = func.call @helper(%w) : (tensor<4xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}
