// RUN: trellis-opt %s -split-input-file -trellis-assign-stages="stages=2 layers=1,1" -verify-diagnostics
// RUN: not trellis-opt %s -split-input-file -trellis-assign-stages="stages=2 schedule=zero-bubble" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// Tests that an unknown schedule is refused by the option parser.
// SCHEDULE: for the --schedule option: Cannot find option named 'zero-bubble'!

// Tests that a function that is not a step of micro-batches is rejected.
// expected-error @+1 {{expected a step of micro-batches (graph.micro_batches): differentiate it with micro-batches or for a pipeline}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests that an op of the micro-batch that declares no part, with no user or
// operand that has a stage, is rejected.
func.func @train_step(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {graph.micro_batches = 2 : i64} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<4xf32>
  // expected-error @+1 {{'graph.neg' op has no pipeline stage: it declares no model part (graph.part) and no user or operand has one}}
  %c = graph.neg %w {graph.phase = "forward"} : tensor<4xf32>
  %s = graph.microbatch_sum %b : tensor<4xf32>
  %t = graph.microbatch_sum %c : tensor<4xf32>
  return %s, %t : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a total over micro-batches of a value of the step is rejected.
func.func @train_step(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {graph.micro_batches = 2 : i64} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<4xf32>
  %s = graph.microbatch_sum %b : tensor<4xf32>
  // expected-error @+1 {{'graph.microbatch_sum' op sums a value over micro-batches that no op of the micro-batch makes (expected an operand marked with graph.phase)}}
  %t = graph.microbatch_sum %x : tensor<4xf32>
  return %s, %t : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that the cost model of a balanced split rejects parts out of model
// order (no layers given: the balanced split reads @forward).
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.neg %x {graph.part = #graph.part<layer 1>} : tensor<4xf32>
  // expected-error @+1 {{expected model parts in model order (embedding, layers 0, 1, ..., head): an op of the layer 0 follows the layer 1}}
  %b = graph.neg %a {graph.part = #graph.part<layer 0>} : tensor<4xf32>
  return %b : tensor<4xf32>
}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> attributes {graph.micro_batches = 2 : i64} {
  return %x : tensor<4xf32>
}
