// A step whose argument is a partial sum: a plan holds whole or split
// values.
trellis.mesh @mesh = <["dp"=1]>
func.func @train_step(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones", trellis.sharding = #trellis.sharding<@mesh, [{}], partial<sum>={"dp"}>}) -> tensor<f32> attributes {trellis.partitioned} {
  %loss = graph.reduce_sum %w dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}
