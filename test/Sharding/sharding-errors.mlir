// RUN: not trellis-opt %s -trellis-apply-preset="dp=0" 2>&1 | FileCheck %s --check-prefix=DEGREE
// RUN: not trellis-opt %s -trellis-apply-preset="mesh=dp=2 tp=2" 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not trellis-opt %s -trellis-apply-preset="mesh=dp=2,,tp=2" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not trellis-opt %s -trellis-apply-preset="mesh=dp=2,rows=2" 2>&1 | FileCheck %s --check-prefix=NO-ROLE
// RUN: not trellis-opt %s -trellis-apply-preset="mesh=pp=2,dp=2" 2>&1 | FileCheck %s --check-prefix=PIPELINE
// RUN: not trellis-opt %s -trellis-apply-preset="mesh=tp=2,model:tensor=2" 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not trellis-opt %s -trellis-apply-preset="dp=2 function=absent" 2>&1 | FileCheck %s --check-prefix=NO-FUNCTION
// RUN: not trellis-opt %s -trellis-apply-preset="dp=2 function=no_inputs" 2>&1 | FileCheck %s --check-prefix=NO-INPUT
// RUN: not trellis-opt %s -trellis-apply-preset="dp=2" -trellis-apply-preset="dp=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not trellis-opt %s -trellis-apply-context-parallel="function=absent" 2>&1 | FileCheck %s --check-prefix=CP-FUNCTION
// RUN: not trellis-opt %s -trellis-partition 2>&1 | FileCheck %s --check-prefix=UNPROPAGATED
// RUN: not trellis-opt %s -trellis-apply-preset="dp=2 function=calls" -trellis-propagate-shardings -trellis-partition 2>&1 | FileCheck %s --check-prefix=CALL

// Tests that the sharding passes, run alone, say what they expected and
// found.
// DEGREE: error: expected dp, cp and tp >= 1, found 0, 1 and 1
// BOTH: error: expected the mesh or the degrees (dp, tp, cp), found both
// MALFORMED: error: mesh 'dp=2,,tp=2': expected a mesh axis name, found ','
// NO-ROLE: error: mesh axis 'rows': expected a role of data, tensor, context or expert (the pipeline phase adds the pipeline's axis), found unassigned
// PIPELINE: error: mesh axis 'pp': expected a role of data, tensor, context or expert (the pipeline phase adds the pipeline's axis), found pipeline
// TWO: error: mesh 'tp=2,model:tensor=2': expected at most one tensor axis
// NO-FUNCTION: error: expected a function @absent to annotate, found none
// NO-INPUT: error: found no input argument to split over dp
// TWICE: error: a symbol @mesh exists already
// CP-FUNCTION: error: expected a training step @absent to split along the sequence, found none
// UNPROPAGATED: error: 'graph.matmul' op has no propagated sharding: run -trellis-propagate-shardings first
// CALL: error: 'func.call' op has no sharding rule: the partitioner handles graph ops only
trellis.mesh @other = <["dp"=2]>
func.func @train_step(%w: tensor<4x4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"},
                      %x: tensor<2x4xf32> {graph.role = "input", graph.param = "tokens", trellis.sharding = #trellis.sharding<@other, [{"dp"}, {}]>}) -> tensor<2x4xf32> {
  %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
  return %y : tensor<2x4xf32>
}

func.func @no_inputs(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

func.func private @helper(tensor<2x4xf32>) -> tensor<2x4xf32>
func.func @calls(%x: tensor<2x4xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<2x4xf32> {
  %y = func.call @helper(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
