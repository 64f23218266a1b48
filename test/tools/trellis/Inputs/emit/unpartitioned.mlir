// A step that still holds a sharding annotation.
trellis.mesh @mesh = <["dp"=1]>
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32> {
  %s = trellis.shard %w <@mesh, [{"dp"}]> : tensor<4xf32>
  %loss = graph.reduce_sum %s dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
