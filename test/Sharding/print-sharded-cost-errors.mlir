// RUN: trellis-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(func.func(trellis-print-sharded-cost))'

// Tests that an op without a sharding rule is named: the query prices what
// the partitioner would partition, graph ops.
trellis.mesh @mesh = <["dp"=2]>
func.func @collective(%x: tensor<4xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{'trellis.all_gather' op has no sharding rule: the cost query prices graph ops only}}
  %0 = trellis.all_gather %x over @mesh ["dp"] dim 0 : tensor<4xf32> -> tensor<8xf32>
  return %x : tensor<4xf32>
}

// -----

// Tests that a step whose shardings were not propagated is refused with the
// pass to run first.
trellis.mesh @mesh = <["dp"=2]>
func.func @unpropagated(%x: tensor<4xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{'graph.exp' op has no propagated sharding: run -trellis-propagate-shardings first}}
  %0 = graph.exp %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
