// RUN: trellis-opt %s -trellis-expert-bias-update="rate=0.001" | FileCheck %s
// RUN: trellis-opt %s -trellis-accumulate-micro-batches="micro-batches=2 function=train_step" -trellis-expert-bias-update | FileCheck %s --check-prefix=MICRO
// RUN: trellis-opt %s -trellis-accumulate-micro-batches="micro-batches=2 function=train_step" -trellis-expert-load -trellis-expert-bias-update | FileCheck %s --check-prefix=SHARED
// RUN: not trellis-opt %s -trellis-expert-bias-update="function=step" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not trellis-opt %s -trellis-expert-bias-update="rate=0" 2>&1 | FileCheck %s --check-prefix=RATE

// Tests that a router whose bias is a state gets the bias's update from the
// step's slots per expert (its own counts, or new ones), returned as the
// state's new value; a router without a bias is left alone. With
// micro-batches the counts are summed over them first.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32> {graph.updates = 2 : i64})
// CHECK: %[[W:.*]], %[[E:.*]] = graph.moe_route %{{.*}} bias %arg2 top_k 2
// CHECK-NEXT: %[[C:.*]] = graph.expert_counts %[[E]] experts 4
// CHECK-NOT: graph.expert_bias_update
// CHECK: %[[U:.*]] = graph.expert_bias_update %arg2, %[[C]] rate 1.000000e-03 {graph.part = #graph.part<layer 0>}
// CHECK-NOT: graph.expert_bias_update
// CHECK: return %{{.*}}, %[[U]]
// MICRO: %[[S:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 0>}
// MICRO: graph.expert_bias_update %{{.*}}, %[[S]]
// After -trellis-expert-load, its sums over the micro-batches serve the
// update: one per layer.
// SHARED: %[[S0:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 0>} : tensor<4xf32>
// SHARED: graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 1>} : tensor<4xf32>
// SHARED-NOT: graph.microbatch_sum
// SHARED: graph.expert_bias_update %arg2, %[[S0]]
// MISSING: error: expected a training step @step to update its routers' biases in, found none
// RATE: error: expected a bias update rate > 0, found 0
func.func @train_step(%x: tensor<2x3x8xf32> {graph.role = "input", graph.param = "x"},
                      %router: tensor<8x4xf32> {graph.role = "param", graph.param = "router"},
                      %bias: tensor<4xf32> {graph.role = "state", graph.param = "bias", graph.init = "zeros"}) -> tensor<f32> {
  %logits = graph.matmul %x, %router {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x3x8xf32>, tensor<8x4xf32>
  %weights, %experts = graph.moe_route %logits bias %bias top_k 2 {scoring = "sigmoid", graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x3x4xf32>, tensor<4xf32>
  %weights1, %experts1 = graph.moe_route %logits top_k 1 {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<2x3x4xf32>
  %sum = graph.reduce_sum %weights dims [0, 1, 2] {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<2x3x2xf32>
  return %sum : tensor<f32>
}

