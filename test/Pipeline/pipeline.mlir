// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true optimizer=sgd" -trellis-pipeline="stages=2 layers=1,1 schedule=gpipe" | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 optimizer=sgd" -trellis-pipeline="stages=1" | FileCheck %s --check-prefix=ONE

// Tests that the pipeline phase runs as one registered pipeline: stage
// assignment, split, schedule (here GPipe: every forward, then every backward)
// and verification; with one stage, only the split into action programs and
// their schedule (each micro-batch's forward then backward).
// CHECK-LABEL: func.func @train_step.stage0
// CHECK-SAME: trellis.schedule = ["F0", "F1", "RB0", "B0", "RB1", "B1", "step"]
// CHECK-LABEL: func.func @train_step.stage1
// CHECK-SAME: trellis.schedule = ["RF0", "F0", "RF1", "F1", "B0", "B1", "step"]
// ONE-NOT: trellis.mesh
// ONE-LABEL: func.func @train_step.stage0
// ONE-SAME: trellis.schedule = ["F0", "B0", "F1", "B1", "step"]
// ONE-NOT: trellis.send
// ONE: return
func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
