// RUN: trellis-opt %s -trellis-mixed-precision | FileCheck %s
// RUN: trellis-opt %s -trellis-autodiff="precision=bf16" | FileCheck %s --check-prefix=STEP

// Tests that an op marked graph.precision = "f32" (DeepSeek-V3's router)
// computes in fp32 under mixed precision: its bf16 operand is cast up, its
// parameter read uncast; the other matmul runs in bf16 as usual.
// CHECK-LABEL: func.func @forward
// CHECK: %[[E:.*]] = graph.embedding {{.*}} : tensor<16x8xbf16>, tensor<2x4xi32>
// CHECK: %[[UP:.*]] = graph.cast %[[E]] to "f32" {graph.part = #graph.part<layer 0>} : tensor<2x4x8xbf16>
// CHECK-NEXT: %[[R:.*]] = graph.matmul %[[UP]], %arg1 transposed {graph.part = #graph.part<layer 0>, graph.precision = "f32"} : tensor<2x4x8xf32>, tensor<4x8xf32>
// CHECK: graph.moe_route %[[R]] top_k 2
// CHECK: graph.matmul {{.*}} : tensor<2x4x8xbf16>, tensor<8x8xbf16>
// Through the step: the router's weight stays an f32 parameter (its own
// master), its gradient f32 without a cast.
// STEP-LABEL: func.func @train_step
// STEP-SAME: %arg1: tensor<4x8xf32> {graph.init = "normal:0.02", graph.param = "router", graph.role = "param"}
// STEP-NOT: graph.role = "master", graph.param = "router"
func.func @forward(%table: tensor<16x8xf32> {graph.role = "param", graph.param = "table", graph.init = "normal:0.02"},
                   %router: tensor<4x8xf32> {graph.role = "param", graph.param = "router", graph.init = "normal:0.02"},
                   %w: tensor<8x8xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %ids: tensor<2x4xi32> {graph.role = "input", graph.param = "tokens"},
                   %targets: tensor<2x4xi32> {graph.role = "input", graph.param = "targets"}) -> tensor<f32> {
  %e = graph.embedding %table, %ids {graph.part = #graph.part<embedding>} : tensor<16x8xf32>, tensor<2x4xi32>
  %logits = graph.matmul %e, %router transposed {graph.part = #graph.part<layer 0>, graph.precision = "f32"} : tensor<2x4x8xf32>, tensor<4x8xf32>
  %weights, %experts = graph.moe_route %logits top_k 2 {graph.part = #graph.part<layer 0>} : tensor<2x4x4xf32>
  %h = graph.matmul %e, %w {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %total = graph.reduce_sum %weights dims [2] {graph.part = #graph.part<layer 0>} : tensor<2x4x2xf32>
  %column = graph.reshape %total to [2, 4, 1] {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>
  %scaled = graph.mul %h, %column {graph.part = #graph.part<layer 0>} : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  %out = graph.matmul %scaled, %table transposed {graph.part = #graph.part<head>} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss = graph.cross_entropy %out, %targets {graph.part = #graph.part<head>} : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}
