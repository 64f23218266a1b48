// RUN: trellis-opt %s -trellis-autodiff="micro-batches=4 pipelined=true optimizer=sgd" -trellis-assign-stages="stages=2 layers=1,1 schedule=gpipe" -trellis-split-stages -trellis-schedule-pipeline -trellis-verify-pipeline | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="micro-batches=4 pipelined=true optimizer=sgd" -trellis-assign-stages="stages=2 layers=1,1 schedule=zb-h1" -trellis-split-stages -trellis-schedule-pipeline -trellis-verify-pipeline | FileCheck %s --check-prefix=ZB

// Tests that a well-formed pipeline passes the verifier unchanged: GPipe's
// schedule (every forward, then every backward) on both stages, the
// transfers matched by channel.
// CHECK-LABEL: func.func @train_step.stage0
// CHECK-SAME: trellis.schedule = ["F0", "F1", "F2", "F3", "RB0", "B0", "RB1", "B1", "RB2", "B2", "RB3", "B3", "step"]
// CHECK-LABEL: func.func @train_step.stage1
// CHECK-SAME: trellis.schedule = ["RF0", "F0", "RF1", "F1", "RF2", "F2", "RF3", "F3", "B0", "B1", "B2", "B3", "step"]

// Tests that ZB-H1's split backward (weight-gradient actions W apart from
// the input-gradient ones) passes too.
// ZB-LABEL: func.func @train_step.stage0
// ZB-SAME: trellis.schedule = ["F0", "F1", "RW0", "W0", "F2", "RW1", "W1", "F3", "RW2", "W2", "RW3", "W3", "step"]
// ZB-LABEL: func.func @train_step.stage1
// ZB-SAME: trellis.schedule = ["RF0", "F0", "B0", "RF1", "F1", "B1", "W0", "W1", "RF2", "F2", "B2", "RF3", "F3", "B3", "W2", "W3", "step"]

func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
