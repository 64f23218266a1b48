// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true optimizer=sgd" -trellis-clip-gradients="max-norm=0.5" -trellis-assign-stages="stages=2 layers=1,1" -trellis-split-stages | FileCheck %s

// Tests that a stage receives a peer's values of the step in the order the
// peer sends them (NCCL pairs the transfers of two ranks in order; the
// plan loader refuses any other order). Clipping makes three step values
// cross from stage 1 to stage 0: stage 1 sends the loss (channel 4) and
// the gradients' norm (5) as it makes them, and the clip factor (3) last;
// stage 0 reads the clip factor first, so its receives of 4 and 5 move up
// before the receive of 3, right before the factor's first reader.

// CHECK-LABEL: func.func @train_step.stage0
// CHECK: trellis.send %{{.*}} to @pipeline ["pp"] peer 1 channel 2 {trellis.program = "step"}
// CHECK-NEXT: trellis.recv from @pipeline ["pp"] peer 1 channel 4 {trellis.program = "step"}
// CHECK-NEXT: trellis.recv from @pipeline ["pp"] peer 1 channel 5 {trellis.program = "step"}
// CHECK-NEXT: %[[FACTOR:.*]] = trellis.recv from @pipeline ["pp"] peer 1 channel 3 {trellis.program = "step"}
// CHECK-NEXT: graph.mul %{{.*}}, %[[FACTOR]] {trellis.program = "step"}

// CHECK-LABEL: func.func @train_step.stage1
// CHECK: trellis.send %{{.*}} to @pipeline ["pp"] peer 0 channel 4 {trellis.program = "step"}
// CHECK: trellis.recv from @pipeline ["pp"] peer 0 channel 2 {trellis.program = "step"}
// CHECK: trellis.send %{{.*}} to @pipeline ["pp"] peer 0 channel 5 {trellis.program = "step"}
// CHECK: trellis.send %{{.*}} to @pipeline ["pp"] peer 0 channel 3 {trellis.program = "step"}

func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
