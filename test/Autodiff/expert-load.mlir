// RUN: trellis-opt %s -split-input-file -trellis-expert-load | FileCheck %s
// RUN: trellis-opt %s -split-input-file -trellis-accumulate-micro-batches="micro-batches=2 function=train_step" -trellis-expert-load | FileCheck %s --check-prefix=MICRO
// RUN: not trellis-opt %s -split-input-file -trellis-expert-load="function=step" 2>&1 | FileCheck %s --check-prefix=MISSING

// Tests that each layer's expert counts (the loss's own, or new ones) are
// a result of the step, [layers, experts], marked as the expert_load
// metric; with micro-batches, summed over them.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<2x4xf32> {graph.metric = "expert_load", graph.report = {label = "expert load max/mean", summary = "max_over_mean"}})
// CHECK: %[[W0:.*]], %[[E0:.*]] = graph.moe_route
// CHECK-NEXT: %[[C0:.*]] = graph.expert_counts %[[E0]] experts 4
// CHECK: %[[W1:.*]], %[[E1:.*]] = graph.moe_route
// CHECK: %[[C1:.*]] = graph.expert_counts %[[E1]] experts 4
// CHECK-NOT: graph.expert_counts
// CHECK: %[[R0:.*]] = graph.reshape %[[C0]] to [1, 4]
// CHECK: %[[R1:.*]] = graph.reshape %[[C1]] to [1, 4]
// CHECK: %[[L:.*]] = graph.concat %[[R0]], %[[R1]] dim 0
// CHECK: return %{{.*}}, %[[L]]
// MICRO: %[[S0:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 0>}
// MICRO: graph.reshape %[[S0]] to [1, 4]
// MISSING: error: expected a training step @step to count its experts' tokens, found none
func.func @train_step(%x: tensor<2x3x8xf32> {graph.role = "input", graph.param = "x"},
                      %router: tensor<8x4xf32> {graph.role = "param", graph.param = "router"}) -> tensor<f32> {
  %logits = graph.matmul %x, %router {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x3x8xf32>, tensor<8x4xf32>
  %weights, %experts = graph.moe_route %logits top_k 2 {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x3x4xf32>
  %counts = graph.expert_counts %experts experts 4 {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x3x2xi32>
  %weights1, %experts1 = graph.moe_route %logits top_k 1 {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<2x3x4xf32>
  %sum = graph.reduce_sum %weights dims [0, 1, 2] {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<2x3x2xf32>
  return %sum : tensor<f32>
}

