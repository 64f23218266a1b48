// RUN: trellis-opt %s -trellis-assign-stages="stages=2 layers=1,1" | FileCheck %s

// Tests that every op of the micro-batch gets the virtual stage of its
// part (the embedding and layer 0 on stage 0, layer 1 and the head on
// stage 1), that an op of no part goes with its user, that a micro-batch's
// total goes where its operand is made, that ops of the step get no stage,
// and that the function records the pipeline it was cut for.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: graph.micro_batches = 2 : i64
// CHECK-SAME: trellis.pipeline_chunks = 1 : i64
// CHECK-SAME: trellis.pipeline_schedule = "1f1b"
// CHECK-SAME: trellis.pipeline_stages = 2 : i64
// CHECK-SAME: trellis.stage_layers = array<i64: 1, 1>
// CHECK: graph.fill 1.000000e+00 shape [2, 8] {graph.phase = "forward", trellis.stage = 0 : i64}
// CHECK: graph.add {{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64}
// CHECK: graph.matmul {{.*}} {graph.part = #graph.part<layer 1>, graph.phase = "forward", trellis.stage = 1 : i64}
// CHECK: graph.reduce_sum {{.*}} {graph.part = #graph.part<head>, graph.phase = "forward", trellis.stage = 1 : i64}
// CHECK: graph.microbatch_sum {{.*}} {graph.part = #graph.part<head>, trellis.stage = 1 : i64}
// CHECK: graph.scale {{.*}} by 5.000000e-01 : tensor<f32>
func.func @train_step(%w1: tensor<8x8xf32> {graph.role = "param", graph.param = "w1", graph.init = "zeros"},
                      %x: tensor<2x8xf32> {graph.role = "param", graph.param = "x", graph.init = "zeros"})
    -> tensor<f32> attributes {graph.micro_batches = 2 : i64} {
  %c = graph.fill 1.0 shape [2, 8] {graph.phase = "forward"}
  %a = graph.add %x, %c {graph.part = #graph.part<layer 0>, graph.phase = "forward"} : tensor<2x8xf32>, tensor<2x8xf32>
  %b = graph.matmul %a, %w1 {graph.part = #graph.part<layer 1>, graph.phase = "forward"} : tensor<2x8xf32>, tensor<8x8xf32>
  %s = graph.reduce_sum %b dims [0, 1] {graph.part = #graph.part<head>, graph.phase = "forward"} : tensor<2x8xf32>
  %t = graph.microbatch_sum %s {graph.part = #graph.part<head>} : tensor<f32>
  %m = graph.scale %t by 0.5 : tensor<f32>
  return %m : tensor<f32>
}
