// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true optimizer=sgd" -trellis-assign-stages="stages=2 layers=1,1" -trellis-split-stages -trellis-schedule-pipeline | FileCheck %s

// Tests that the 1F1B rule orders each stage's programs (stage 0: one
// forward of warm-up, each backward after posting its gradient's receive;
// stage 1: each activation received, then its forward and backward). Where
// a send completes the runtime proves from these schedules: the stage
// functions name no completion.
// CHECK-LABEL: func.func @train_step.stage0
// CHECK-SAME: trellis.schedule = ["F0", "F1", "RB0", "B0", "RB1", "B1", "step"]
// CHECK: trellis.send {{.*}} channel 0 {graph.phase = "forward", trellis.program = "forward.c0"}
// CHECK-LABEL: func.func @train_step.stage1
// CHECK-SAME: trellis.schedule = ["RF0", "F0", "B0", "RF1", "F1", "B1", "step"]
// CHECK-NOT: trellis.complete_with
// CHECK: return

func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
