// RUN: trellis-opt %s -trellis-autodiff="optimizer=none micro-batches=2 pipelined=true" | FileCheck %s

// Tests that reverse mode writes the marks the pipeline split reads: every op
// of the micro-batch (written once) carries its phase, and every backward op
// the part of the forward op it differentiates (the seed of the backward: the
// loss's part); the ops of the step carry no phase. The backward ops that only
// make their part's parameter gradients are phase "weight" (a zero-bubble
// schedule runs them late); the gradient the embedding waits for stays
// "backward". A parameter two parts use (here `w`, like a tied embedding) is
// summed over the micro-batches per part (graph.microbatch_sum, marked with the
// part: the head's, then the embedding's), and the two totals are added once in
// the step.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: attributes {graph.micro_batches = 2 : i64}
// CHECK: %[[H:.*]] = graph.matmul %{{.*}}, %{{.*}} {graph.part = #graph.part<embedding>, graph.phase = "forward"}
// CHECK: %[[L:.*]] = graph.reduce_sum {{.*}} {graph.part = #graph.part<head>, graph.phase = "forward"}
// CHECK: graph.fill 5.000000e-01 shape [] {graph.part = #graph.part<head>, graph.phase = "backward"}
// CHECK: %[[DH:.*]] = graph.matmul %{{.*}}, %{{.*}} transposed {graph.part = #graph.part<head>, graph.phase = "backward"}
// CHECK: %[[HEAD:.*]] = graph.matmul %[[H]] transposed, %{{.*}} {graph.part = #graph.part<head>, graph.phase = "weight"}
// CHECK: %[[EMB:.*]] = graph.matmul %{{.*}} transposed, %[[DH]] {graph.part = #graph.part<embedding>, graph.phase = "weight"}
// CHECK-NOT: graph.matmul
// CHECK: %[[HEADS:.*]] = graph.microbatch_sum %[[HEAD]] {graph.part = #graph.part<head>} : tensor<4x4xf32>
// CHECK: %[[EMBS:.*]] = graph.microbatch_sum %[[EMB]] {graph.part = #graph.part<embedding>} : tensor<4x4xf32>
// CHECK: %[[GRAD:.*]] = graph.add %[[HEADS]], %[[EMBS]] : tensor<4x4xf32>
// CHECK: %[[SUM:.*]] = graph.microbatch_sum %[[L]] {graph.part = #graph.part<head>} : tensor<f32>
// CHECK: %[[LOSS:.*]] = graph.scale %[[SUM]] by 5.000000e-01 : tensor<f32>
// CHECK: return %[[LOSS]], %[[GRAD]]
func.func @forward(%w: tensor<4x4xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %h = graph.matmul %x, %w {graph.part = #graph.part<embedding>} : tensor<2x4xf32>, tensor<4x4xf32>
  %y = graph.matmul %h, %w {graph.part = #graph.part<head>} : tensor<2x4xf32>, tensor<4x4xf32>
  %loss = graph.reduce_sum %y dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x4xf32>
  return %loss : tensor<f32>
}

// Without a pipeline (pipelined=false), the two parts' gradients of `w` are
// added inside the micro-batch, in the part that contributes last (the
// embedding's, whose weight ops both terms then are), and summed over the
// micro-batches once: one gradient buffer, one reduction.
// RUN: trellis-opt %s -trellis-autodiff="optimizer=none micro-batches=2" | FileCheck %s --check-prefix=ONE
// ONE-LABEL: func.func @gradients
// ONE: %[[HEAD:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.part = #graph.part<head>, graph.phase = "weight"}
// ONE: %[[EMB:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.part = #graph.part<embedding>, graph.phase = "weight"}
// ONE: %[[SUM:.*]] = graph.add %[[HEAD]], %[[EMB]] {graph.part = #graph.part<embedding>, graph.phase = "weight"}
// ONE: %[[GRAD:.*]] = graph.microbatch_sum %[[SUM]] {graph.part = #graph.part<embedding>} : tensor<4x4xf32>
// ONE-NOT: graph.add
// ONE: return %{{.*}}, %[[GRAD]]
