// RUN: trellis-opt %s -trellis-mixed-precision | FileCheck %s
// RUN: trellis-opt %s -trellis-mixed-precision="compute=f16" | FileCheck %s --check-prefix=F16
// RUN: trellis-opt %s -trellis-autodiff="precision=bf16" | FileCheck %s --check-prefix=STEP
// RUN: trellis-opt %s -trellis-autodiff="precision=bf16 reduce-gradients-in-compute=true" | FileCheck %s --check-prefix=REDUCE

// Tests that the forward computes in bf16 from f32 parameters: each
// parameter is cast once per model part before its first use there (the
// tied table twice: embedding and head), every Low op then runs in bf16,
// cross-entropy (Float32) reads the bf16 logits uncast, and the loss stays
// f32.
// CHECK-LABEL: func.func @forward
// CHECK: %[[T0:.*]] = graph.cast %arg0 to "bf16" {graph.part = #graph.part<embedding>} : tensor<16x8xf32>
// CHECK: %[[E:.*]] = graph.embedding %[[T0]], %arg3 {graph.part = #graph.part<embedding>} : tensor<16x8xbf16>, tensor<2x4xi32>
// CHECK: %[[G:.*]] = graph.cast %arg1 to "bf16" {graph.part = #graph.part<layer 0>} : tensor<8xf32>
// CHECK: %[[N:.*]] = graph.rms_norm %[[E]], %[[G]] eps {{.*}} : tensor<2x4x8xbf16>, tensor<8xbf16>
// CHECK: %[[W:.*]] = graph.cast %arg2 to "bf16" {graph.part = #graph.part<layer 0>} : tensor<8x8xf32>
// CHECK: %[[H:.*]] = graph.matmul %[[N]], %[[W]] {graph.part = #graph.part<layer 0>} : tensor<2x4x8xbf16>, tensor<8x8xbf16>
// CHECK: %[[A:.*]] = graph.gelu_tanh %[[H]] {graph.part = #graph.part<layer 0>} : tensor<2x4x8xbf16>
// CHECK: %[[T1:.*]] = graph.cast %arg0 to "bf16" {graph.part = #graph.part<head>} : tensor<16x8xf32>
// CHECK: %[[L:.*]] = graph.matmul %[[A]], %[[T1]] transposed {graph.part = #graph.part<head>} : tensor<2x4x8xbf16>, tensor<16x8xbf16>
// CHECK-NOT: graph.cast
// CHECK: %[[LOSS:.*]] = graph.cross_entropy %[[L]], %arg4 {{.*}}: tensor<2x4x16xbf16>, tensor<2x4xi32>
// The loss arithmetic stays in fp32: no cast after cross-entropy.
// CHECK-NOT: graph.cast
// CHECK: %[[HALF:.*]] = graph.scale %[[LOSS]] by 5.000000e-01 {graph.part = #graph.part<head>} : tensor<f32>
// CHECK: return %[[HALF]] : tensor<f32>

// F16-LABEL: func.func @forward
// F16: graph.cast %arg0 to "f16"
// F16: graph.matmul {{.*}} : tensor<2x4x8xf16>, tensor<8x8xf16>

// Through the autodiff phase: the backward runs in bf16 (the logits'
// gradient comes out of cross-entropy in bf16, uncast) and every
// parameter gradient, being the gradient of a cast, is cast back to f32.
// Unpipelined, each parameter is cast once (as autocast caches a weight's
// cast): the tied table has one compute copy, its two uses' gradients are
// added in bf16 inside the micro-batch and cast back once. The parameters
// become bf16 arguments that the micro-batch reads directly; AdamW
// updates their f32 masters (role master, same name and init), and each
// new parameter is its new master cast to bf16, once per step.
// STEP-LABEL: func.func @train_step
// STEP-SAME: %arg0: tensor<16x8xbf16> {graph.init = "normal:0.02", graph.param = "table", graph.role = "param"}
// STEP-SAME: %arg12: tensor<16x8xf32> {graph.init = "normal:0.02", graph.param = "table", graph.role = "master"}
// STEP-SAME: -> (tensor<f32>, tensor<16x8xbf16> {graph.updates = 0 : i64}
// STEP-SAME: tensor<16x8xf32> {graph.updates = 12 : i64}
// STEP-NOT: graph.cast %arg
// STEP: graph.embedding %arg0, %arg3 {{.*}}: tensor<16x8xbf16>, tensor<2x4xi32>
// STEP: graph.cross_entropy_grad {{.*}} : tensor<2x4x16xbf16>, tensor<2x4xi32>
// STEP-NOT: graph.cast {{.*}} to "bf16" {graph.part = #graph.part<head>, graph.phase = "backward"}
// STEP: graph.matmul {{.*}}graph.phase = "backward"} : tensor<2x4x16xbf16>, tensor<16x8xbf16>
// STEP: %[[DHEAD:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} : tensor<8x16xbf16>, tensor<8x8xbf16>
// STEP: %[[DW:.*]] = graph.matmul %{{.*}} transposed, %{{.*}}graph.phase = "weight"} : tensor<8x8xbf16>, tensor<8x8xbf16>
// STEP: graph.cast %[[DW]] to "f32" {{.*}} : tensor<8x8xbf16>
// STEP: %[[DEMB:.*]] = graph.embedding_grad
// STEP: %[[SUM:.*]] = graph.add %[[DHEAD]], %[[DEMB]] {graph.part = #graph.part<embedding>, graph.phase = "weight"} : tensor<16x8xbf16>, tensor<16x8xbf16>
// STEP: %[[TIED:.*]] = graph.cast %[[SUM]] to "f32" {{.*}} : tensor<16x8xbf16>
// STEP-NOT: graph.add
// STEP: %[[NEW:.*]], %{{.*}}, %{{.*}} = graph.adamw %arg12, %[[TIED]], {{.*}} : tensor<16x8xf32>
// STEP: %[[NEW16:.*]] = graph.cast %[[NEW]] to "bf16" : tensor<16x8xf32>
// STEP: return %{{.*}}, %[[NEW16]],

// A pipeline may put the table's two uses on two stages: it is cast once
// per model part, and the parts' f32 gradients are summed over the
// micro-batches apart and added by the step.
// RUN: trellis-opt %s -trellis-autodiff="precision=bf16 pipelined=true" | FileCheck %s --check-prefix=PIPE
// PIPE-LABEL: func.func @forward
// PIPE: graph.cast %arg0 to "bf16" {graph.part = #graph.part<embedding>}
// PIPE: graph.cast %arg0 to "bf16" {graph.part = #graph.part<head>}
// PIPE-LABEL: func.func @train_step
// PIPE: %[[HEAD:.*]] = graph.microbatch_sum {{.*}} {graph.part = #graph.part<head>} : tensor<16x8xf32>
// PIPE: %[[EMB:.*]] = graph.microbatch_sum {{.*}} {graph.part = #graph.part<embedding>} : tensor<16x8xf32>
// PIPE: %[[TIED:.*]] = graph.add %[[HEAD]], %[[EMB]] : tensor<16x8xf32>, tensor<16x8xf32>
// PIPE: graph.adamw %{{.*}}, %[[TIED]],

// With reduce-gradients-in-compute, the parameter casts and the gradients'
// casts back are marked graph.reduce_first (a data-parallel partial
// gradient is reduced in bf16, before the cast).
// RUN: trellis-opt %s -trellis-mixed-precision="reduce-gradients-in-compute=true" | FileCheck %s --check-prefix=REDUCEFWD
// REDUCEFWD: graph.cast %arg0 to "bf16" {graph.part = #graph.part<embedding>, graph.reduce_first}
// REDUCE-LABEL: func.func @train_step
// REDUCE: graph.cast %{{.*}} to "f32" {graph.part = #graph.part<embedding>, graph.phase = "weight", graph.reduce_first} : tensor<16x8xbf16>

func.func @forward(%table: tensor<16x8xf32> {graph.role = "param", graph.param = "table", graph.init = "normal:0.02"},
                   %gain: tensor<8xf32> {graph.role = "param", graph.param = "gain", graph.init = "ones"},
                   %w: tensor<8x8xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %ids: tensor<2x4xi32> {graph.role = "input", graph.param = "tokens"},
                   %targets: tensor<2x4xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %e = graph.embedding %table, %ids {graph.part = #graph.part<embedding>} : tensor<16x8xf32>, tensor<2x4xi32>
  %n = graph.rms_norm %e, %gain eps 1.0e-5 {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8xf32>
  %h = graph.matmul %n, %w {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %a = graph.gelu_tanh %h {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>
  %logits = graph.matmul %a, %table transposed {graph.part = #graph.part<head>} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss = graph.cross_entropy %logits, %targets {graph.part = #graph.part<head>} : tensor<2x4x16xf32>, tensor<2x4xi32>
  %half = graph.scale %loss by 0.5 {graph.part = #graph.part<head>} : tensor<f32>
  return %half : tensor<f32>
}

// RUN: trellis-opt %s -trellis-autodiff="precision=f16" | FileCheck %s --check-prefix=F16STEP
// RUN: trellis-opt %s -trellis-autodiff="precision=f16 optimizer=none" | FileCheck %s --check-prefix=F16GRADS
// f16 with an optimizer scales the loss by a runtime argument (role
// loss_scale) and unscales gradients and loss before the update; a step
// returning its gradients has no scale to undo, so it gets none.
// F16STEP-LABEL: func.func @train_step
// F16STEP-SAME: graph.role = "loss_scale"
// F16STEP: graph.div
// F16STEP: graph.adamw
// F16GRADS-LABEL: func.func @gradients
// F16GRADS-NOT: loss_scale
