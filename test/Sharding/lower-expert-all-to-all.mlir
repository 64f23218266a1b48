// RUN: trellis-opt %s -split-input-file -trellis-lower-expert-all-to-all | FileCheck %s

// Tests that an expert MLP split over ep=2 in the all-gather form (tokens and
// ids gathered over ep, the partial products reduce-scattered back) becomes
// the all-to-all dispatch: every expert op reads this rank's own slots and
// sets dispatch = "all_to_all", the products are the op results (no
// reduce_scatter), the weight gradient keeps its result, and no gather is
// left.
trellis.mesh @mesh = <["ep"=2]>

// CHECK-LABEL: func.func @expert_mlp
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[IDS:.*]]: tensor<2x8x2xi32>, %[[UP:.*]]: tensor<2x32x16xf32>, %[[DOWN:.*]]: tensor<2x16x32xf32>, %[[DY:.*]]: tensor<2x8x2x16xf32>)
// CHECK-NOT: trellis.all_gather
// CHECK: %[[H:.*]] = graph.expert_matmul %[[X]], %[[UP]] transposed, %[[IDS]] {axes = ["ep"], dispatch = "all_to_all"} : tensor<2x8x16xf32>, tensor<2x32x16xf32>, tensor<2x8x2xi32>
// CHECK-NEXT: %[[A:.*]] = graph.silu %[[H]] : tensor<2x8x2x32xf32>
// CHECK-NEXT: %[[Y:.*]] = graph.expert_matmul %[[A]], %[[DOWN]] transposed, %[[IDS]] {axes = ["ep"], dispatch = "all_to_all"} : tensor<2x8x2x32xf32>, tensor<2x16x32xf32>, tensor<2x8x2xi32>
// CHECK-NEXT: %[[DW:.*]] = graph.expert_matmul_weight_grad %[[A]], %[[DY]], %[[IDS]] experts 2 {axes = ["ep"], dispatch = "all_to_all", transpose_rhs} : tensor<2x8x2x32xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2xi32>
// CHECK-NOT: trellis.reduce_scatter
// CHECK-NEXT: return %[[Y]], %[[DW]]
func.func @expert_mlp(%x: tensor<2x8x16xf32>, %ids: tensor<2x8x2xi32>,
                      %up: tensor<2x32x16xf32>, %down: tensor<2x16x32xf32>,
                      %dy: tensor<2x8x2x16xf32>)
    -> (tensor<2x8x2x16xf32>, tensor<2x16x32xf32>)
    attributes {trellis.partitioned} {
  %xg = trellis.all_gather %x over @mesh ["ep"] dim 0 : tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  %idsg = trellis.all_gather %ids over @mesh ["ep"] dim 0 : tensor<2x8x2xi32> -> tensor<4x8x2xi32>
  %hp = graph.expert_matmul %xg, %up transposed, %idsg {axes = ["ep"]} : tensor<4x8x16xf32>, tensor<2x32x16xf32>, tensor<4x8x2xi32>
  %h = trellis.reduce_scatter %hp over @mesh ["ep"] dim 0 sum : tensor<4x8x2x32xf32> -> tensor<2x8x2x32xf32>
  %a = graph.silu %h : tensor<2x8x2x32xf32>
  %ag = trellis.all_gather %a over @mesh ["ep"] dim 0 : tensor<2x8x2x32xf32> -> tensor<4x8x2x32xf32>
  %yp = graph.expert_matmul %ag, %down transposed, %idsg {axes = ["ep"]} : tensor<4x8x2x32xf32>, tensor<2x16x32xf32>, tensor<4x8x2xi32>
  %y = trellis.reduce_scatter %yp over @mesh ["ep"] dim 0 sum : tensor<4x8x2x16xf32> -> tensor<2x8x2x16xf32>
  %dyg = trellis.all_gather %dy over @mesh ["ep"] dim 0 : tensor<2x8x2x16xf32> -> tensor<4x8x2x16xf32>
  %dw = graph.expert_matmul_weight_grad %ag, %dyg, %idsg experts 2 {axes = ["ep"], transpose_rhs} : tensor<4x8x2x32xf32>, tensor<4x8x2x16xf32>, tensor<4x8x2xi32>
  return %y, %dw : tensor<2x8x2x16xf32>, tensor<2x16x32xf32>
}

// -----

// Tests that ops not of that form are left alone: a product whose partial
// result something else reads, and a gather along another dimension.
trellis.mesh @mesh = <["ep"=2]>

// CHECK-LABEL: func.func @left_alone
// CHECK: trellis.all_gather
// CHECK: graph.expert_matmul {{.*}} {axes = ["ep"]}
// CHECK-NOT: dispatch
// CHECK: graph.expert_matmul_weight_grad {{.*}} {axes = ["ep"], transpose_rhs}
// CHECK-NOT: dispatch
func.func @left_alone(%x: tensor<2x8x16xf32>, %ids: tensor<2x8x2xi32>,
                      %up: tensor<2x32x16xf32>, %dy: tensor<2x8x2x32xf32>)
    -> (tensor<4x8x2x32xf32>, tensor<2x8x2x32xf32>, tensor<2x32x16xf32>)
    attributes {trellis.partitioned} {
  %xg = trellis.all_gather %x over @mesh ["ep"] dim 0 : tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  %idsg = trellis.all_gather %ids over @mesh ["ep"] dim 0 : tensor<2x8x2xi32> -> tensor<4x8x2xi32>
  %hp = graph.expert_matmul %xg, %up transposed, %idsg {axes = ["ep"]} : tensor<4x8x16xf32>, tensor<2x32x16xf32>, tensor<4x8x2xi32>
  %h = trellis.reduce_scatter %hp over @mesh ["ep"] dim 0 sum : tensor<4x8x2x32xf32> -> tensor<2x8x2x32xf32>
  %dyg = trellis.all_gather %dy over @mesh ["ep"] dim 1 : tensor<2x8x2x32xf32> -> tensor<2x16x2x32xf32>
  %dyr = graph.reshape %dyg to [4, 8, 2, 32] : tensor<2x16x2x32xf32>
  %dw = graph.expert_matmul_weight_grad %xg, %dyr, %idsg experts 2 {axes = ["ep"], transpose_rhs} : tensor<4x8x16xf32>, tensor<4x8x2x32xf32>, tensor<4x8x2xi32>
  return %hp, %h, %dw : tensor<4x8x2x32xf32>, tensor<2x8x2x32xf32>, tensor<2x32x16xf32>
}
