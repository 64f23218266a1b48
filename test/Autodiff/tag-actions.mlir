// RUN: trellis-opt %s -trellis-autodiff="optimizer=none micro-batches=2 tag-actions=true" | FileCheck %s

// Tests the marks the pipeline split reads: every op of a micro-batch
// carries its micro-batch and phase, and every backward op the part of the
// forward op it differentiates (the seed of the backward: the loss's part);
// the ops after the micro-batches carry none of them. The backward ops that only make their part's parameter gradients
// are phase "weight" (a zero-bubble schedule runs them late); the gradient
// the embedding waits for stays "backward". A parameter two parts use (here
// `w`, like a tied embedding) is accumulated per part over the
// micro-batches (the head's sum, then the embedding's), and the two sums
// are added once at the end.

// CHECK-LABEL: func.func @gradients
// CHECK: %[[H0:.*]] = graph.matmul %{{.*}}, %{{.*}} {graph.micro_batch = 0 : i64, graph.part = #graph.part<embedding>, graph.phase = "forward"}
// CHECK: graph.reduce_sum {{.*}} {graph.micro_batch = 0 : i64, graph.part = #graph.part<head>, graph.phase = "forward"}
// CHECK: graph.fill 5.000000e-01 shape [] {graph.micro_batch = 0 : i64, graph.part = #graph.part<head>, graph.phase = "backward"}
// CHECK: %[[DH0:.*]] = graph.matmul %{{.*}}, %{{.*}} transposed {graph.micro_batch = 0 : i64, graph.part = #graph.part<head>, graph.phase = "backward"}
// CHECK: %[[HEAD0:.*]] = graph.matmul %[[H0]] transposed, %{{.*}} {graph.micro_batch = 0 : i64, graph.part = #graph.part<head>, graph.phase = "weight"}
// CHECK: %[[EMB0:.*]] = graph.matmul %{{.*}} transposed, %[[DH0]] {graph.micro_batch = 0 : i64, graph.part = #graph.part<embedding>, graph.phase = "weight"}
// CHECK: graph.matmul {{.*}} {graph.micro_batch = 1 : i64, graph.part = #graph.part<embedding>, graph.phase = "forward"}
// CHECK: %[[HEAD1:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.micro_batch = 1 : i64, graph.part = #graph.part<head>, graph.phase = "weight"}
// CHECK: %[[HEAD:.*]] = graph.add %[[HEAD0]], %[[HEAD1]] {graph.micro_batch = 1 : i64, graph.part = #graph.part<head>, graph.phase = "weight"}
// CHECK: %[[EMB1:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.micro_batch = 1 : i64, graph.part = #graph.part<embedding>, graph.phase = "weight"}
// CHECK: %[[EMB:.*]] = graph.add %[[EMB0]], %[[EMB1]] {graph.micro_batch = 1 : i64, graph.part = #graph.part<embedding>, graph.phase = "weight"}
// CHECK: %[[SUM:.*]] = graph.add %{{.*}}, %{{.*}} : tensor<f32>
// CHECK: %[[GRAD:.*]] = graph.add %[[HEAD]], %[[EMB]] : tensor<4x4xf32>
// CHECK: return %{{.*}}, %[[GRAD]]
func.func @forward(%w: tensor<4x4xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %h = graph.matmul %x, %w {graph.part = #graph.part<embedding>} : tensor<2x4xf32>, tensor<4x4xf32>
  %y = graph.matmul %h, %w {graph.part = #graph.part<head>} : tensor<2x4xf32>, tensor<4x4xf32>
  %loss = graph.reduce_sum %y dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x4xf32>
  return %loss : tensor<f32>
}
