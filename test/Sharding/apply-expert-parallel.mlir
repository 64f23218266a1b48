// RUN: trellis-opt %s -trellis-autodiff="optimizer=adamw" -trellis-apply-preset="mesh=dp=2,ep=2" -trellis-apply-expert-parallel | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="optimizer=adamw" -trellis-apply-preset="mesh=dp=2,ep=2" -trellis-apply-expert-parallel -trellis-propagate-shardings -trellis-partition | FileCheck %s --check-prefix=PARTITIONED
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=adamw" -trellis-apply-preset="mesh=ep=3" -trellis-apply-expert-parallel 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: trellis-opt %s -trellis-autodiff="optimizer=adamw" -trellis-apply-preset="mesh=dp=2" -trellis-apply-expert-parallel | FileCheck %s --check-prefix=NO-EP

// Tests that expert parallelism is annotations: the experts' stacked weight
// and its moments are split along the experts over ep; each expert op reads
// its tokens whole over ep (split over dp alone) and carries the axes; the
// product's result goes back to the batch's split.
// CHECK: trellis.mesh @mesh = <["dp"=2, "ep"=2]>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.param = "experts.*.up.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"ep"}, {}, {}]>
// CHECK-SAME: graph.param = "experts.*.up.weight", graph.role = "adam_m", trellis.sharding = #trellis.sharding<@mesh, [{"ep"}, {}, {}]>
// CHECK: %[[X:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}, {}]>
// CHECK: %[[IDS:.*]] = trellis.shard %{{.*}} <@mesh, [{"dp"}, {}, {}]>
// CHECK: %[[UP:.*]] = graph.expert_matmul %[[X]], %{{.*}} transposed, %[[IDS]] {axes = ["ep"]
// CHECK-NEXT: trellis.shard %[[UP]] <@mesh, [{"dp", "ep"}, {}, {}, {}]>
// CHECK: graph.expert_matmul_weight_grad {{.*}} experts 4 {axes = ["ep"]

// Partitioned: the tokens gathered over ep, each rank's 2 experts computed,
// the result reduce-scattered home; the experts' gradient reduced over dp
// alone, every other gradient over dp and ep.
// PARTITIONED-LABEL: func.func @train_step
// PARTITIONED-SAME: tensor<2x6x8xf32> {graph.init = "normal:0.02", graph.param = "experts.*.up.weight"
// PARTITIONED: trellis.all_gather %{{.*}} over @mesh ["ep"] dim 0 {{.*}} : tensor<3x4x8xf32> -> tensor<6x4x8xf32>
// PARTITIONED: %[[P:.*]] = graph.expert_matmul {{.*}}axes = ["ep"]{{.*}} : tensor<6x4x8xf32>, tensor<2x6x8xf32>, tensor<6x4x2xi32>
// PARTITIONED: trellis.reduce_scatter %[[P]] over @mesh ["ep"] dim 0 sum {{.*}} : tensor<6x4x2x6xf32> -> tensor<3x4x2x6xf32>
// PARTITIONED: %[[G:.*]] = graph.expert_matmul_weight_grad {{.*}} experts 2 {axes = ["ep"]
// PARTITIONED-DAG: trellis.all_reduce %[[G]] over @mesh ["dp"] sum
// PARTITIONED-DAG: trellis.all_reduce %{{.*}} over @mesh ["dp", "ep"] sum

// DIVIDE: error: 'graph.expert_matmul' op splits its 4 experts over ep = 3: expected the expert count divisible by 3
// NO-EP-NOT: axes = ["ep"]
func.func @forward(%router: tensor<8x4xf32> {graph.role = "param", graph.param = "router.weight", graph.init = "normal:0.02"},
                   %up: tensor<4x6x8xf32> {graph.role = "param", graph.param = "experts.*.up.weight", graph.init = "normal:0.02"},
                   %x: tensor<12x4x8xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %logits = graph.matmul %x, %router {graph.part = #graph.part<layer 0>} : tensor<12x4x8xf32>, tensor<8x4xf32>
  %weights, %experts = graph.moe_route %logits top_k 2 {graph.part = #graph.part<layer 0>, normalize} : tensor<12x4x4xf32>
  %h = graph.expert_matmul %x, %up transposed, %experts {graph.part = #graph.part<layer 0>} : tensor<12x4x8xf32>, tensor<4x6x8xf32>, tensor<12x4x2xi32>
  %a = graph.silu %h {graph.part = #graph.part<layer 0>} : tensor<12x4x2x6xf32>
  %w = graph.reshape %weights to [12, 4, 2, 1] {graph.part = #graph.part<layer 0>} : tensor<12x4x2xf32>
  %m = graph.mul %a, %w {graph.part = #graph.part<layer 0>} : tensor<12x4x2x6xf32>, tensor<12x4x2x1xf32>
  %loss = graph.reduce_sum %m dims [0, 1, 2, 3] {graph.part = #graph.part<head>} : tensor<12x4x2x6xf32>
  return %loss : tensor<f32>
}
