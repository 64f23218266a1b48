// RUN: trellis-opt %s -split-input-file -trellis-split-stages="mesh-order=pp" -verify-diagnostics

// Tests that the plan's mesh order names every axis of the step's mesh.
trellis.mesh @mesh = <["dp"=2]>
// expected-error @+1 {{mesh-order lacks the step's axis 'dp'}}
func.func @train_step(%x: tensor<4x2xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}) -> tensor<4x2xf32>
    attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stages = 2 : i64, trellis.pipeline_chunks = 1 : i64, trellis.pipeline_schedule = "1f1b", trellis.stage_layers = array<i64: 1, 1>} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64} : tensor<4x2xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward", trellis.stage = 1 : i64} : tensor<4x2xf32>
  %t = graph.microbatch_sum %b {trellis.stage = 1 : i64} : tensor<4x2xf32>
  return %t : tensor<4x2xf32>
}

// -----

// Tests that every op of the micro-batch of a pipelined step needs its
// virtual stage.
func.func @train_step(%x: tensor<4xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"}) -> tensor<4xf32>
    attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stages = 2 : i64, trellis.pipeline_chunks = 1 : i64, trellis.pipeline_schedule = "1f1b", trellis.stage_layers = array<i64: 1, 1>} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{'graph.neg' op expected a virtual stage (trellis.stage) in [0, 2), found none: cut the step with trellis-assign-stages first}}
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<4xf32>
  %t = graph.microbatch_sum %b {trellis.stage = 1 : i64} : tensor<4xf32>
  return %t : tensor<4xf32>
}

// -----

// Tests that a value of a micro-batch reaches the step only through
// graph.microbatch_sum.
func.func @train_step(%x: tensor<4xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"}) -> tensor<4xf32>
    attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stages = 2 : i64, trellis.pipeline_chunks = 1 : i64, trellis.pipeline_schedule = "1f1b", trellis.stage_layers = array<i64: 1, 1>} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward", trellis.stage = 1 : i64} : tensor<4xf32>
  // expected-error @+1 {{'graph.scale' op reads a value of a micro-batch from pipeline rank 1 on rank 0 in the step: expected it to reach the step through graph.microbatch_sum}}
  %c = graph.scale %b by 2.0 : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// Tests that only a step of micro-batches splits into action programs.
// expected-error @+1 {{expected a step of micro-batches (graph.micro_batches) to split into actions}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests that a step of several blocks is refused (stages are cut from one
// straight-line program).
trellis.mesh @mesh = <["dp"=1]>
// expected-error @+1 {{expected a function with a single block}}
func.func @train_step(%x: tensor<4xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"}) -> tensor<4xf32>
    attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stages = 2 : i64, trellis.pipeline_chunks = 1 : i64, trellis.pipeline_schedule = "1f1b", trellis.stage_layers = array<i64: 1, 1>} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64} : tensor<4xf32>
  return %a : tensor<4xf32>
^unreachable:
  return %x : tensor<4xf32>
}
