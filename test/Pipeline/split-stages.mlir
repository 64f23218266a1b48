// RUN: trellis-opt %s -trellis-autodiff="micro-batches=2 pipelined=true optimizer=sgd" -trellis-assign-stages="stages=2 layers=1,1" -trellis-split-stages | FileCheck %s

// Tests that a step of micro-batches cut into 2 stages becomes one function
// per stage (the step itself goes): its action programs one after the
// other (each op marked with its program), written once for one
// micro-batch, then the step program; the values crossing stages as
// trellis.send at the end of the action that made them and trellis.recv in
// the receive program of the action that reads them (each micro-batch's on
// the same channel, the runtime tells them apart); the loss crosses in the
// step programs, its mean taken where the total is made (a scalar of the
// step runs where its operand comes from); the arguments each holds and the
// step results each returns. No schedule yet.

// CHECK: trellis.mesh @pipeline = <["pp"=2]>
// CHECK-NOT: func.func @train_step(
// CHECK-LABEL: func.func @train_step.stage0
// CHECK-SAME: %{{.*}}: tensor<8x8xf32> {{{.*}}graph.param = "layers.0.w"{{.*}}trellis.held}
// CHECK-SAME: -> (tensor<f32> {trellis.result = 0 : i64}, tensor<8x8xf32> {graph.updates = 0 : i64, trellis.result = 1 : i64})
// CHECK-SAME: trellis.pipeline_stage = 0 : i64
// CHECK-NOT: trellis.schedule
// CHECK-SAME: trellis.stage_of = "train_step"
// CHECK: %[[H0:.*]] = graph.matmul {{.*}} trellis.program = "forward.c0"
// CHECK: trellis.send %[[H0]] to @pipeline ["pp"] peer 1 channel 0 {graph.phase = "forward", trellis.program = "forward.c0"}
// CHECK: %[[DH0:.*]] = trellis.recv from @pipeline ["pp"] peer 1 channel 1 {graph.phase = "backward", trellis.program = "backward_receive.c0"}
// CHECK: %[[DW0:.*]] = graph.matmul %{{.*}} transposed, %[[DH0]] {{.*}}trellis.program = "backward.c0"
// CHECK: %[[TOTAL0:.*]] = graph.microbatch_sum %[[DW0]] {{.*}}trellis.program = "backward.c0"
// CHECK: %[[W0:.*]] = graph.sgd %{{.*}}, %[[TOTAL0]] {{.*}}trellis.program = "step"
// CHECK: %[[MEAN:.*]] = trellis.recv from @pipeline ["pp"] peer 1 channel 2 {trellis.program = "step"}
// CHECK: return %[[MEAN]], %[[W0]]

// CHECK-LABEL: func.func @train_step.stage1
// CHECK-SAME: -> (tensor<8x8xf32> {graph.updates = 1 : i64, trellis.result = 2 : i64})
// CHECK: %[[X1:.*]] = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {graph.phase = "forward", trellis.program = "forward_receive.c0"}
// CHECK: graph.matmul %[[X1]], {{.*}} trellis.program = "forward.c0"
// CHECK: %[[SUM:.*]] = graph.microbatch_sum {{.*}}trellis.program = "forward.c0"
// CHECK: %[[DX1:.*]] = graph.matmul {{.*}} transposed {{.*}}graph.phase = "backward", trellis.program = "backward.c0"
// CHECK: trellis.send %[[DX1]] to @pipeline ["pp"] peer 0 channel 1 {graph.phase = "backward", trellis.program = "backward.c0"}
// CHECK: %[[MEAN1:.*]] = graph.scale %[[SUM]] by 5.000000e-01 {trellis.program = "step"}
// CHECK: trellis.send %[[MEAN1]] to @pipeline ["pp"] peer 0 channel 2 {trellis.program = "step"}
// CHECK: graph.sgd {{.*}}trellis.program = "step"

func.func @forward(
    %w0: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.0.w", graph.init = "normal:0.02"},
    %w1: tensor<8x8xf32> {graph.role = "param", graph.param = "layers.1.w", graph.init = "normal:0.02"},
    %x: tensor<2x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %h0 = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>} : tensor<2x8xf32>, tensor<8x8xf32>
  %h1 = graph.matmul %h0, %w1 {graph.part = #graph.part<layer 1>} : tensor<2x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h1 dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x8xf32>
  return %loss : tensor<f32>
}
