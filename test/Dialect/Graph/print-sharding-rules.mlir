// RUN: trellis-opt %s -trellis-print-sharding-rules -verify-diagnostics -split-input-file -o /dev/null

// Tests that a matmul's rule splits M and N and reduces K (splitting it leaves
// the result partial).
func.func @matmul(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %x3: tensor<2x4x16xf32>, %wt: tensor<32x16xf32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f2], [f2, f1]) -> ([f0, f1]) {f0=8 parallel, f1=32 parallel, f2=16 reduction}}}
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3], [f3, f2]) -> ([f0, f1, f2]) {f0=2 parallel, f1=4 parallel, f2=32 parallel, f3=16 reduction}}}
  %1 = graph.matmul %x3, %w : tensor<2x4x16xf32>, tensor<16x32xf32>
  // expected-remark @+1 {{sharding rule: ([f0, f2], [f1, f2]) -> ([f0, f1]) {f0=8 parallel, f1=32 parallel, f2=16 reduction}}}
  %2 = graph.matmul %x, %wt transposed : tensor<8x16xf32>, tensor<32x16xf32>
  return
}

// -----

// Tests that a broadcast operand maps its stretched dimension to no factor.
func.func @broadcast(%x: tensor<8x32xf32>, %b: tensor<32xf32>, %c: tensor<1x32xf32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f1], [f1]) -> ([f0, f1]) {f0=8 parallel, f1=32 parallel}}}
  %0 = graph.add %x, %b : tensor<8x32xf32>, tensor<32xf32>
  // expected-remark @+1 {{sharding rule: ([f0, f1], [_, f1]) -> ([f0, f1]) {f0=8 parallel, f1=32 parallel}}}
  %1 = graph.mul %x, %c : tensor<8x32xf32>, tensor<1x32xf32>
  return
}

// -----

// Tests that attention splits batch and heads (grouped-query heads share a
// factor of the kv-head count) and the queries' sequence (a piece knows its
// place), and keeps the keys' sequence and the head dimension whole.
func.func @attention(%q: tensor<2x8x4x16xf32>, %kv: tensor<2x8x2x16xf32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3, f4], [f0, f2, f3, f4], [f0, f2, f3, f4]) -> ([f0, f1, f3, f4]) {f0=2 parallel, f1=8 parallel, f2=8 whole, f3=2 parallel, f4=16 whole}}}
  %0 = graph.attention %q, %kv, %kv scale 0.25 : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>
  return
}

// -----

// Tests that merging [heads, dim] into features keeps heads splittable, and
// that the embedding's vocabulary is a reduction factor (vocab-parallel lookups
// give partial sums).
func.func @reshape_embedding(%x: tensor<2x8x4x16xf32>, %t: tensor<256x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f1, f2, f3]) -> ([f0, f1, f2]) {f0=2 parallel, f1=8 parallel, f2=4 parallel, f3=16 whole}}}
  %0 = graph.reshape %x to [2, 8, 64] : tensor<2x8x4x16xf32>
  // expected-remark @+1 {{sharding rule: ([f0, f1], [f2, f3]) -> ([f2, f3, f1]) {f0=256 reduction, f1=64 parallel, f2=2 parallel, f3=8 parallel}}}
  %1 = graph.embedding %t, %ids : tensor<256x64xf32>, tensor<2x8xi32>
  return
}

// -----

// Tests that layer norm splits rows and keeps features whole, and that the
// optimizer is elementwise over the parameter with a scalar step.
func.func @norm_and_optimizer(%x: tensor<4x64xf32>, %w: tensor<64xf32>, %s: tensor<f32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f1], [f1], [f1]) -> ([f0, f1]) {f0=4 parallel, f1=64 whole}}}
  %0 = graph.layer_norm %x, %w, %w eps 1.0e-5 : tensor<4x64xf32>, tensor<64xf32>
  // expected-remark @+1 {{sharding rule: ([f0], [f0], [f0], [f0], []) -> ([f0], [f0], [f0]) {f0=64 parallel}}}
  %1:3 = graph.adamw %w, %w, %w, %w, %s {learning_rate = 1.0e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0} : tensor<64xf32>
  return
}

// -----

// Tests the experts' rules: tokens and slots split freely; the experts stay
// whole, unless the op has axes (expert parallelism): then the product's
// expert factor is a reduction (slots of other ranks' experts give zeros)
// and the weight gradient's is parallel (each rank its own experts).
func.func @experts(%x: tensor<2x3x8xf32>, %w: tensor<4x6x8xf32>, %ids: tensor<2x3x2xi32>, %g: tensor<2x3x2x6xf32>, %l: tensor<2x3x4xf32>) {
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3], [f5, f4, f3], [f0, f1, f2]) -> ([f0, f1, f2, f4]) {f0=2 parallel, f1=3 parallel, f2=2 parallel, f3=8 reduction, f4=6 parallel, f5=4 whole}}}
  %h = graph.expert_matmul %x, %w transposed, %ids : tensor<2x3x8xf32>, tensor<4x6x8xf32>, tensor<2x3x2xi32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3], [f5, f4, f3], [f0, f1, f2]) -> ([f0, f1, f2, f4]) {f0=2 parallel, f1=3 parallel, f2=2 parallel, f3=8 reduction, f4=6 parallel, f5=4 reduction}}}
  %e = graph.expert_matmul %x, %w transposed, %ids {axes = ["ep"]} : tensor<2x3x8xf32>, tensor<4x6x8xf32>, tensor<2x3x2xi32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3], [f0, f1, f2, f4], [f0, f1, f2]) -> ([f5, f4, f3]) {f0=2 reduction, f1=3 reduction, f2=2 reduction, f3=8 parallel, f4=6 parallel, f5=4 whole}}}
  %dw = graph.expert_matmul_weight_grad %x, %g, %ids experts 4 {transpose_rhs} : tensor<2x3x8xf32>, tensor<2x3x2x6xf32>, tensor<2x3x2xi32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f3], [f0, f1, f2, f4], [f0, f1, f2]) -> ([f5, f4, f3]) {f0=2 reduction, f1=3 reduction, f2=2 reduction, f3=8 parallel, f4=6 parallel, f5=4 parallel}}}
  %dwe = graph.expert_matmul_weight_grad %x, %g, %ids experts 4 {transpose_rhs, axes = ["ep"]} : tensor<2x3x8xf32>, tensor<2x3x2x6xf32>, tensor<2x3x2xi32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f2]) -> ([f0, f1, f3], [f0, f1, f3]) {f0=2 parallel, f1=3 parallel, f2=4 whole, f3=2 whole}}}
  %wt, %ex = graph.moe_route %l top_k 2 : tensor<2x3x4xf32>
  // expected-remark @+1 {{sharding rule: ([f0, f1, f2]) -> ([f3]) {f0=2 reduction, f1=3 reduction, f2=2 reduction, f3=4 whole}}}
  %c = graph.expert_counts %ids experts 4 : tensor<2x3x2xi32>
  return
}
