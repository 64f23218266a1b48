// RUN: trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=1" | FileCheck %s --check-prefix=ONE
// RUN: trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=2" | FileCheck %s --check-prefix=TWO
// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2" -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=2" | FileCheck %s --check-prefix=TWO-M2
// RUN: trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=3" | FileCheck %s --check-prefix=THREE
// RUN: trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=3" -trellis-sharding-pipeline="dp=1 bucket-bytes=0" | FileCheck %s --check-prefix=PARTITIONED
// RUN: trellis-opt %s -trellis-autodiff -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=1" -trellis-sharding-pipeline="dp=1" | FileCheck %s --check-prefix=BUCKETED
// RUN: trellis-opt %s -trellis-autodiff -trellis-clip-gradients -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=1" | FileCheck %s --check-prefix=CLIP-ONE
// RUN: trellis-opt %s -trellis-autodiff -trellis-clip-gradients -trellis-apply-preset="dp=4" -trellis-apply-zero="stage=2" | FileCheck %s --check-prefix=CLIP-TWO

// Tests that ZeRO-1 splits the optimizer states over dp and fixes the
// parameters' layout (replicated), so that no split propagates onto them. A
// dimension dp divides is split (w's rows); g (6 elements, dp=4) is split
// unevenly: trellis.padded records its whole shape (pieces of 2, the last
// padded).
// ONE-LABEL: func.func @train_step
// ONE-SAME: %arg0: tensor<4x6xf32> {{{.*}}graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}, {}]>}
// ONE-SAME: %arg1: tensor<6xf32> {{{.*}}graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}]>}
// ONE-SAME: %arg3: tensor<4x6xf32> {{{.*}}graph.role = "adam_m", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}
// ONE-SAME: %arg4: tensor<6xf32> {{{.*}}graph.role = "adam_m", trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>}
// ONE-SAME: %arg6: tensor<6xf32> {{{.*}}graph.role = "adam_v", trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>}
// ONE-NOT: trellis.shard %
// ONE: graph.adamw %arg0

// ZeRO-2 constrains each gradient where the backward makes it to its
// state's layout: the partitioner reduce-scatters it there.
// TWO-LABEL: func.func @train_step
// TWO: %[[DG:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}]> {graph.part = #graph.part<layer 1>, graph.phase = "weight", trellis.padded = array<i64: 6>} : tensor<6xf32>
// TWO: %[[DW:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<4x6xf32>
// TWO: graph.adamw %arg0, %[[DW]],
// TWO: graph.adamw %arg1, %[[DG]],

// With micro-batches, each micro-batch's gradient is constrained before
// it is summed: the accumulator is the split piece.
// TWO-M2-LABEL: func.func @train_step
// TWO-M2: %[[DG:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}]> {{.*}}graph.phase = "weight"
// TWO-M2: %[[DW:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}]> {{.*}}graph.phase = "weight"
// TWO-M2: graph.microbatch_sum %[[DG]]
// TWO-M2: graph.microbatch_sum %[[DW]]

// A gradient that more than its update reads (clipping's squares) is read
// split by every reader: ZeRO-1 constrains it where the step has it (no
// phase: reduce-scattered once per step), ZeRO-2 where the backward makes
// it. Neither reader needs it whole (no all-reduce of the gradient).
// CLIP-ONE-LABEL: func.func @train_step
// CLIP-ONE: %[[DG:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}]> {trellis.padded = array<i64: 6>} : tensor<6xf32>
// CLIP-ONE: %[[DW:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}]> : tensor<4x6xf32>
// CLIP-ONE: graph.mul %[[DW]], %[[DW]]
// CLIP-ONE: graph.mul %[[DG]], %[[DG]]
// CLIP-ONE: %[[W:.*]] = graph.mul %[[DW]], %{{.*}} :
// CLIP-ONE: graph.adamw %arg0, %[[W]],
// CLIP-TWO-LABEL: func.func @train_step
// CLIP-TWO: %[[DG:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}]> {graph.part = #graph.part<layer 1>, graph.phase = "weight", trellis.padded = array<i64: 6>} : tensor<6xf32>
// CLIP-TWO: %[[DW:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<4x6xf32>
// CLIP-TWO: graph.mul %[[DW]], %[[DW]]
// CLIP-TWO: graph.mul %[[DG]], %[[DG]]
// CLIP-TWO: %[[W:.*]] = graph.mul %[[DW]], %{{.*}} :
// CLIP-TWO: graph.adamw %arg0, %[[W]],

// ZeRO-3 splits the parameters too; each phase and part reads them
// through its own whole-layout constraint (gathered again for the
// backward), placed where the part before it begins: layer 1's gain is
// gathered before layer 0's matmul runs.
// THREE-LABEL: func.func @train_step
// THREE-SAME: %arg0: tensor<4x6xf32> {{{.*}}graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}
// THREE-SAME: %arg1: tensor<6xf32> {{{.*}}graph.role = "param", trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"dp"}]>}
// THREE: trellis.shard %arg0 <@mesh, [{}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// THREE-NEXT: trellis.shard %arg1 <@mesh, [{}]> {graph.part = #graph.part<layer 1>, graph.phase = "forward"}
// THREE-NEXT: graph.matmul
// THREE: trellis.shard %arg1 <@mesh, [{}]> {graph.part = #graph.part<layer 1>, graph.phase = "backward"}
// THREE: graph.adamw %arg0,
// THREE: graph.adamw %arg1,

// Partitioned: the gathers of the stored pieces (g's padded piece cut back
// to its 6 elements), the gradients padded and reduce-scattered, no
// all_reduce of a gradient, and each update on this rank's piece.
// PARTITIONED-LABEL: func.func @train_step
// PARTITIONED-SAME: %arg1: tensor<2xf32> {{{.*}}trellis.padded = array<i64: 6>
// PARTITIONED: trellis.all_gather %arg0 over @mesh ["dp"] dim 0 {{.*}} : tensor<1x6xf32> -> tensor<4x6xf32>
// PARTITIONED: %[[G:.*]] = trellis.all_gather %arg1 over @mesh ["dp"] dim 0 {{.*}} : tensor<2xf32> -> tensor<8xf32>
// PARTITIONED-NEXT: graph.slice %[[G]] offsets [0] sizes [6] {{.*}} : tensor<8xf32>
// PARTITIONED: %[[P:.*]] = graph.pad %{{.*}} low [0] high [2] {{.*}} : tensor<6xf32>
// PARTITIONED-NEXT: trellis.reduce_scatter %[[P]] over @mesh ["dp"] dim 0 sum {{.*}} : tensor<8xf32> -> tensor<2xf32>
// PARTITIONED: trellis.reduce_scatter %{{.*}} over @mesh ["dp"] dim 0 sum {{.*}} : tensor<4x6xf32> -> tensor<1x6xf32>
// PARTITIONED-NOT: trellis.all_reduce {{.*}} : tensor<4x6xf32>
// PARTITIONED: graph.adamw %arg0, {{.*}} : tensor<1x6xf32>
// PARTITIONED: graph.adamw %arg1, {{.*}} : tensor<2xf32>
// Bucketed (ZeRO-1): the two reduce_scatters become one over a [ranks,
// elements] matrix whose row r holds each gradient's piece r (the 4x6 as
// 4x6, the padded 8 as 4x2), and the two all_gathers of the updated
// pieces one over their rows.
// BUCKETED-LABEL: func.func @train_step
// BUCKETED: %[[ROWS:.*]] = graph.concat %{{.*}}, %{{.*}} dim 1 : tensor<4x6xf32>, tensor<4x2xf32>
// BUCKETED-NEXT: trellis.reduce_scatter %[[ROWS]] over @mesh ["dp"] dim 0 sum : tensor<4x8xf32> -> tensor<1x8xf32>
// BUCKETED-NOT: trellis.reduce_scatter
// BUCKETED: %[[PIECES:.*]] = graph.concat %{{.*}}, %{{.*}} dim 1 : tensor<1x6xf32>, tensor<1x2xf32>
// BUCKETED-NEXT: trellis.all_gather %[[PIECES]] over @mesh ["dp"] dim 0 : tensor<1x8xf32> -> tensor<4x8xf32>
// BUCKETED-NOT: trellis.all_gather
func.func @forward(%w: tensor<4x6xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %g: tensor<6xf32> {graph.role = "param", graph.param = "g", graph.init = "ones"},
                   %x: tensor<4x4xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<4x4xf32>, tensor<4x6xf32>
  %z = graph.mul %y, %g {graph.part = #graph.part<layer 1>} : tensor<4x6xf32>, tensor<6xf32>
  %loss = graph.reduce_sum %z dims [0, 1] {graph.part = #graph.part<head>} : tensor<4x6xf32>
  return %loss : tensor<f32>
}
