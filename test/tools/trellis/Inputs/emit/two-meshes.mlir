// A step whose collectives run over two meshes.
trellis.mesh @a = <["dp"=1]>
trellis.mesh @b = <["tp"=1]>
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32> attributes {trellis.partitioned} {
  %x = trellis.all_reduce %w over @a ["dp"] sum : tensor<4xf32>
  %y = trellis.all_reduce %x over @b ["tp"] sum : tensor<4xf32>
  %loss = graph.reduce_sum %y dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
