// RUN: trellis-opt %s -split-input-file -trellis-propagate-shardings -verify-diagnostics

// Tests that one function's shardings live on one mesh.
trellis.mesh @a = <["dp"=2]>
trellis.mesh @b = <["dp"=2]>
// expected-error @+1 {{arguments are sharded over two meshes: @a and @b}}
func.func @two_meshes(%x: tensor<4xf32> {trellis.sharding = #trellis.sharding<@a, [{"dp"}]>},
                      %y: tensor<4xf32> {trellis.sharding = #trellis.sharding<@b, [{"dp"}]>}) -> tensor<4xf32> {
  %z = graph.add %x, %y : tensor<4xf32>, tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

trellis.mesh @a = <["dp"=2]>
trellis.mesh @b = <["dp"=2]>
func.func @constraint_elsewhere(%x: tensor<4xf32> {trellis.sharding = #trellis.sharding<@a, [{"dp"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{a constraint over @b in a function sharded over @a}}
  %y = trellis.shard %x <@b, [{}]> : tensor<4xf32>
  return %y : tensor<4xf32>
}
