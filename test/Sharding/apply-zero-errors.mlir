// RUN: not trellis-opt %s -trellis-autodiff -trellis-apply-preset="tp=2" -trellis-apply-zero="stage=1" 2>&1 | FileCheck %s --check-prefix=NO-DP
// RUN: not trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=2" -trellis-apply-zero="stage=1 axes=rows" 2>&1 | FileCheck %s --check-prefix=AXES
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="dp=2" -trellis-apply-zero="stage=1" 2>&1 | FileCheck %s --check-prefix=NO-STATE
// RUN: not trellis-opt %s -trellis-apply-zero="stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not trellis-opt %s -trellis-apply-zero="stage=2" 2>&1 | FileCheck %s --check-prefix=NO-STEP
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="dp=2" -trellis-apply-zero="stage=3" | FileCheck %s --check-prefix=SGD-THREE
// RUN: trellis-opt %s -trellis-apply-zero="stage=0" | FileCheck %s --check-prefix=ZERO

// Tests that the preset's errors each say what was expected and found.
// AXES: error: ZeRO-1: expected axes of the mesh dp=2,tp=1, found "rows"
// NO-DP: error: ZeRO-1 shards over the data-parallel axis "dp": expected a mesh with dp > 1, found the mesh dp=1,tp=2
// NO-STATE: error: ZeRO-1 shards optimizer states, and the step has none (an optimizer with moments, or mixed precision's fp32 masters): expected AdamW or a mixed-precision step, found none
// STAGE: error: expected ZeRO stage 0, 1, 2 or 3, found 4
// NO-STEP: error: expected a training step @train_step to shard with ZeRO, found none

// SGD in fp32 has no state, but ZeRO-3 still shards its parameters.
// SGD-THREE: graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>
// SGD-THREE: trellis.shard %arg0 <@mesh, [{}]>
// Stage 0 changes nothing.
// ZERO-NOT: trellis.sharding
func.func @forward(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %y = graph.mul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4xf32>
  %loss = graph.reduce_sum %y dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x4xf32>
  return %loss : tensor<f32>
}
