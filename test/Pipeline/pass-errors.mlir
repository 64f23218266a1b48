// RUN: not trellis-opt %s -trellis-assign-stages="stages=2 function=absent" 2>&1 | FileCheck %s --check-prefix=ASSIGN
// RUN: not trellis-opt %s -trellis-assign-stages="stages=2" 2>&1 | FileCheck %s --check-prefix=NO-FORWARD
// RUN: not trellis-opt %s -trellis-split-stages="function=absent" 2>&1 | FileCheck %s --check-prefix=SPLIT

// Tests that the pipeline passes, run alone, name the function they need.
// ASSIGN: error: expected a function @absent to cut into pipeline stages, found none
// NO-FORWARD: error: expected a function @forward for the cost model of a balanced split, or layers per stage
// SPLIT: error: expected a function @absent to split into stages, found none
func.func @train_step(%x: tensor<4xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"}) -> tensor<4xf32>
    attributes {graph.micro_batches = 1 : i64} {
  %a = graph.neg %x {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<4xf32>
  %b = graph.neg %a {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<4xf32>
  return %b : tensor<4xf32>
}
