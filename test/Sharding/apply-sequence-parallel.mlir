// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="tp=2" -trellis-apply-sequence-parallel | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="dp=2 tp=2" -trellis-apply-sequence-parallel | FileCheck %s --check-prefix=DP
// RUN: not trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-apply-preset="dp=2" -trellis-apply-sequence-parallel 2>&1 | FileCheck %s --check-prefix=NO-TP

// Tests that the sequence-parallel preset splits norm regions: the stream a
// norm reads is split along the sequence (dimension 1 of [batch, seq,
// features]) where it is made, for every user; the norm's result is whole again
// for its users, once per phase: the forward's matmul, and the weight gradient,
// which gathers again.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = graph.mul %arg2, %arg2 {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK-NEXT: %[[S:.*]] = trellis.shard %[[X]] <@mesh, [{}, {"tp"}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK-NEXT: %[[N:.*]] = graph.rms_norm %[[S]], %arg1
// CHECK-NEXT: %[[W:.*]] = trellis.shard %[[N]] <@mesh, [{}, {}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// CHECK-NEXT: graph.matmul %[[W]], %arg0 transposed
// CHECK: %[[AGAIN:.*]] = trellis.shard %[[N]] <@mesh, [{}, {}, {}]> {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// CHECK-NEXT: graph.reshape %[[AGAIN]]
// CHECK: graph.rms_norm_grad %[[S]], %arg1
// With data parallelism the batch stays split over dp through the norm
// regions: only the tensor axis is gathered.
// DP-LABEL: func.func @train_step
// DP: %[[X:.*]] = graph.mul %arg2, %arg2
// DP-NEXT: %[[S:.*]] = trellis.shard %[[X]] <@mesh, [{"dp"}, {"tp"}, {}]>
// DP-NEXT: %[[N:.*]] = graph.rms_norm %[[S]], %arg1
// DP-NEXT: trellis.shard %[[N]] <@mesh, [{"dp"}, {}, {}]>
// NO-TP: error: sequence parallelism splits the norm regions over the tensor-parallel axis "tp": expected tp > 1, found a mesh with tp=1
func.func @forward(%w: tensor<8x8xf32> {graph.role = "param", graph.param = "model.layers.0.mlp.up_proj.weight", graph.init = "normal:0.02"},
                   %g: tensor<8xf32> {graph.role = "param", graph.param = "model.layers.0.input_layernorm.weight", graph.init = "ones"},
                   %x: tensor<2x4x8xf32> {graph.role = "input", graph.param = "tokens"}) -> tensor<f32> {
  %s = graph.mul %x, %x {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %n = graph.rms_norm %s, %g eps 1.0e-5 {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8xf32>
  %h = graph.matmul %n, %w transposed {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %loss = graph.reduce_sum %h dims [0, 1, 2] {graph.part = #graph.part<head>} : tensor<2x4x8xf32>
  return %loss : tensor<f32>
}
