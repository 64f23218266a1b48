// RUN: trellis-opt %s | trellis-opt | FileCheck %s
// RUN: trellis-opt %s --mlir-print-op-generic | trellis-opt | FileCheck %s

// Tests that every graph op prints, parses back, and infers its result type.

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3x4xf32>, %b: tensor<4xf32>) -> tensor<2x3x4xf32> {
  // CHECK: %[[FILL:.*]] = graph.fill 1.500000e+00 shape [2, 3, 4]
  %fill = graph.fill 1.5 shape [2, 3, 4]
  // CHECK: graph.constant [2.500000e-01, 6.250000e-02] shape [2]
  %slopes = graph.constant [0.25, 0.0625] shape [2]
  // CHECK: graph.add %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<4xf32>
  %0 = graph.add %a, %b : tensor<2x3x4xf32>, tensor<4xf32>
  // CHECK: graph.sub
  %1 = graph.sub %0, %fill : tensor<2x3x4xf32>, tensor<2x3x4xf32>
  // CHECK: graph.mul
  %2 = graph.mul %1, %b : tensor<2x3x4xf32>, tensor<4xf32>
  // CHECK: graph.div
  %3 = graph.div %2, %a : tensor<2x3x4xf32>, tensor<2x3x4xf32>
  // CHECK: graph.maximum
  %4 = graph.maximum %3, %b : tensor<2x3x4xf32>, tensor<4xf32>
  // CHECK: graph.equal_mask
  %5 = graph.equal_mask %4, %a : tensor<2x3x4xf32>, tensor<2x3x4xf32>
  // CHECK: graph.scale %{{.*}} by 5.000000e-01 : tensor<2x3x4xf32>
  %6 = graph.scale %5 by 0.5 : tensor<2x3x4xf32>
  // CHECK: graph.neg
  %7 = graph.neg %6 : tensor<2x3x4xf32>
  // CHECK: graph.exp
  %8 = graph.exp %7 : tensor<2x3x4xf32>
  // CHECK: graph.log
  %9 = graph.log %8 : tensor<2x3x4xf32>
  // CHECK: graph.tanh
  %10 = graph.tanh %9 : tensor<2x3x4xf32>
  // CHECK: graph.sqrt
  %11 = graph.sqrt %8 : tensor<2x3x4xf32>
  // CHECK: graph.rsqrt
  %12 = graph.rsqrt %11 : tensor<2x3x4xf32>
  // CHECK: graph.sigmoid
  %13 = graph.sigmoid %12 : tensor<2x3x4xf32>
  // CHECK: graph.silu
  %14 = graph.silu %13 : tensor<2x3x4xf32>
  // CHECK: graph.gelu
  %15 = graph.gelu %14 : tensor<2x3x4xf32>
  // CHECK: graph.gelu_tanh
  %16 = graph.gelu_tanh %15 : tensor<2x3x4xf32>
  // CHECK: graph.relu
  %17 = graph.relu %16 : tensor<2x3x4xf32>
  // CHECK: graph.unary_grad gelu_tanh %{{.*}}, %{{.*}} : tensor<2x3x4xf32>
  %18 = graph.unary_grad gelu_tanh %16, %17 : tensor<2x3x4xf32>
  return %18 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @reductions_and_layout
func.func @reductions_and_layout(%a: tensor<2x3x4xf32>) -> tensor<4x3xf32> {
  // CHECK: graph.reduce_sum %{{.*}} dims [0, 2] : tensor<2x3x4xf32>
  %0 = graph.reduce_sum %a dims [0, 2] : tensor<2x3x4xf32>
  // CHECK: graph.reduce_mean %{{.*}} dims [1] keep_dims : tensor<2x3x4xf32>
  %1 = graph.reduce_mean %a dims [1] keep_dims : tensor<2x3x4xf32>
  // CHECK: graph.reduce_max %{{.*}} dims [2] : tensor<2x3x4xf32>
  %2 = graph.reduce_max %a dims [2] : tensor<2x3x4xf32>
  // CHECK: graph.broadcast_to %{{.*}} to [2, 3, 4] : tensor<2x1x4xf32>
  %3 = graph.broadcast_to %1 to [2, 3, 4] : tensor<2x1x4xf32>
  // CHECK: graph.reshape %{{.*}} to [6, 4] : tensor<2x3x4xf32>
  %4 = graph.reshape %3 to [6, 4] : tensor<2x3x4xf32>
  // CHECK: graph.transpose %{{.*}} perm [1, 0] : tensor<6x4xf32>
  %5 = graph.transpose %4 perm [1, 0] : tensor<6x4xf32>
  // CHECK: graph.slice %{{.*}} offsets [0, 1] sizes [4, 3] : tensor<4x6xf32>
  %6 = graph.slice %5 offsets [0, 1] sizes [4, 3] : tensor<4x6xf32>
  // CHECK: graph.pad %{{.*}} low [1, 0] high [0, 2] : tensor<4x3xf32>
  %7 = graph.pad %6 low [1, 0] high [0, 2] : tensor<4x3xf32>
  // CHECK: graph.concat %{{.*}}, %{{.*}} dim 0 : tensor<5x5xf32>, tensor<5x5xf32>
  %8 = graph.concat %7, %7 dim 0 : tensor<5x5xf32>, tensor<5x5xf32>
  %9 = graph.slice %8 offsets [0, 0] sizes [4, 3] : tensor<10x5xf32>
  return %9 : tensor<4x3xf32>
}

// CHECK-LABEL: func.func @layers
func.func @layers(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>, %ids: tensor<2x8xi32>,
                  %table: tensor<32x16xf32>, %q: tensor<2x8x4x4xf32>,
                  %kv: tensor<2x8x2x4xf32>, %step: tensor<f32>) -> tensor<f32> {
  // CHECK: graph.matmul %{{.*}}, %{{.*}} transposed : tensor<2x8x16xf32>, tensor<32x16xf32>
  %logits = graph.matmul %x, %table transposed : tensor<2x8x16xf32>, tensor<32x16xf32>
  // CHECK: graph.matmul %{{.*}} transposed, %{{.*}} : tensor<2x16x8xf32>, tensor<2x16x8xf32>
  %xt = graph.transpose %x perm [0, 2, 1] : tensor<2x8x16xf32>
  %gram = graph.matmul %xt transposed, %xt : tensor<2x16x8xf32>, tensor<2x16x8xf32>
  // CHECK: graph.softmax
  %p = graph.softmax %logits : tensor<2x8x32xf32>
  // CHECK: graph.softmax_grad
  %dp = graph.softmax_grad %p, %p : tensor<2x8x32xf32>
  // CHECK: graph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<2x8x16xf32>, tensor<16xf32>
  %ln = graph.layer_norm %x, %w, %w eps 1.0e-6 : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: graph.layer_norm_grad
  %lnx, %lnw, %lnb = graph.layer_norm_grad %x, %w, %ln eps 1.0e-6 : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: graph.rms_norm
  %rms = graph.rms_norm %x, %w eps 1.0e-6 : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: graph.rms_norm_grad
  %rx, %rw = graph.rms_norm_grad %x, %w, %rms eps 1.0e-6 : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: graph.embedding %{{.*}}, %{{.*}} {vocab_offset = 8 : i64} : tensor<32x16xf32>, tensor<2x8xi32>
  %e = graph.embedding %table, %ids {vocab_offset = 8} : tensor<32x16xf32>, tensor<2x8xi32>
  // CHECK: graph.embedding_grad %{{.*}}, %{{.*}} rows 32 : tensor<2x8xi32>, tensor<2x8x16xf32>
  %de = graph.embedding_grad %ids, %e rows 32 : tensor<2x8xi32>, tensor<2x8x16xf32>
  // CHECK: graph.rope %{{.*}} frequencies [1.000000e+00, 1.000000e-02] {inverse = true} : tensor<2x8x4x4xf32>
  %r = graph.rope %q frequencies [1.0, 0.01] {inverse = true} : tensor<2x8x4x4xf32>
  // CHECK: graph.rope %{{.*}} frequencies [1.000000e+00, 1.000000e-02] {interleaved} : tensor<2x8x4x4xf32>
  %ri = graph.rope %q frequencies [1.0, 0.01] {interleaved} : tensor<2x8x4x4xf32>
  // CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} scale 5.000000e-01 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  %a = graph.attention %r, %kv, %kv scale 0.5 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: graph.attention %{{.*}} scale 5.000000e-01 {softcap = 3.000000e+01 : f64, window = 4 : i64}
  %windowed = graph.attention %r, %kv, %kv scale 0.5 {window = 4 : i64, softcap = 30.0} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: graph.attention_grad %{{.*}} scale 5.000000e-01 {causal = false}
  %dq, %dk, %dv = graph.attention_grad %r, %kv, %kv, %a scale 0.5 {causal = false} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} slopes %{{.*}} : tensor<4xf32> sinks %{{.*}} : tensor<4xf32> scale 5.000000e-01 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  %heads = graph.fill 0.5 shape [4]
  %termed = graph.attention %r, %kv, %kv slopes %heads : tensor<4xf32> sinks %heads : tensor<4xf32> scale 0.5 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} sinks %{{.*}} : tensor<4xf32> scale
  %sunk = graph.attention %r, %kv, %kv sinks %heads : tensor<4xf32> scale 0.5 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}}, %sinks_grad = graph.attention_grad {{.*}} sinks %{{.*}} : tensor<4xf32> scale
  %sq, %sk, %sv, %ds = graph.attention_grad %r, %kv, %kv, %a sinks %heads : tensor<4xf32> scale 0.5 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: %{{.*}}, %{{.*}}, %{{[a-z_0-9]*}} = graph.attention_grad {{.*}} slopes %{{.*}} : tensor<4xf32> scale
  %aq, %ak, %av = graph.attention_grad %r, %kv, %kv, %a slopes %heads : tensor<4xf32> scale 0.5 : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>
  // CHECK: graph.cross_entropy %{{.*}}, %{{.*}} : tensor<2x8x32xf32>, tensor<2x8xi32>
  %loss = graph.cross_entropy %logits, %ids : tensor<2x8x32xf32>, tensor<2x8xi32>
  // CHECK: graph.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {normalizer = 64 : i64} : tensor<2x8x32xf32>, tensor<2x8xi32>
  %dlogits = graph.cross_entropy_grad %logits, %ids, %loss {normalizer = 64} : tensor<2x8x32xf32>, tensor<2x8xi32>
  // CHECK: graph.adamw
  %np, %nm, %nv = graph.adamw %w, %w, %w, %w, %step {learning_rate = 1.0e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.1} : tensor<16xf32>
  // CHECK: graph.sgd
  %ns = graph.sgd %w, %w {learning_rate = 0.1, weight_decay = 0.0} : tensor<16xf32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @experts
func.func @experts(%x: tensor<2x3x8xf32>, %router: tensor<8x4xf32>, %router_bias: tensor<4xf32>, %w: tensor<4x6x8xf32>, %down: tensor<4x8x6xf32>) -> (tensor<2x3x2x8xf32>, tensor<4x6x8xf32>, tensor<2x3x4xf32>, tensor<4xf32>) {
  %logits = graph.matmul %x, %router : tensor<2x3x8xf32>, tensor<8x4xf32>
  // CHECK: %[[W:.*]], %[[E:.*]] = graph.moe_route %{{.*}} top_k 2 {normalize, scaling = 2.500000e+00 : f64, scoring = "sigmoid"} : tensor<2x3x4xf32>
  %weights, %experts = graph.moe_route %logits top_k 2 {scoring = "sigmoid", normalize, scaling = 2.5 : f64} : tensor<2x3x4xf32>
  // DeepSeek-V3's router: a score bias for the choice, two of two groups.
  // CHECK: graph.moe_route %{{.*}} bias %{{.*}} top_k 2 {groups = 2 : i64, scoring = "sigmoid", top_groups = 1 : i64} : tensor<2x3x4xf32>, tensor<4xf32>
  %bw, %be = graph.moe_route %logits bias %router_bias top_k 2 {scoring = "sigmoid", groups = 2 : i64, top_groups = 1 : i64} : tensor<2x3x4xf32>, tensor<4xf32>
  // CHECK: graph.expert_matmul %{{.*}}, %{{.*}} transposed, %[[E]] : tensor<2x3x8xf32>, tensor<4x6x8xf32>, tensor<2x3x2xi32>
  %h = graph.expert_matmul %x, %w transposed, %experts : tensor<2x3x8xf32>, tensor<4x6x8xf32>, tensor<2x3x2xi32>
  // CHECK: graph.expert_matmul %{{.*}}, %{{.*}} transposed, %[[E]] {axes = ["ep"]} : tensor<2x3x2x6xf32>, tensor<4x8x6xf32>, tensor<2x3x2xi32>
  %y = graph.expert_matmul %h, %down transposed, %experts {axes = ["ep"]} : tensor<2x3x2x6xf32>, tensor<4x8x6xf32>, tensor<2x3x2xi32>
  // CHECK: graph.expert_matmul_weight_grad %{{.*}}, %{{.*}}, %[[E]] experts 4 {transpose_rhs} : tensor<2x3x8xf32>, tensor<2x3x2x6xf32>, tensor<2x3x2xi32>
  %dw = graph.expert_matmul_weight_grad %x, %h, %experts experts 4 {transpose_rhs} : tensor<2x3x8xf32>, tensor<2x3x2x6xf32>, tensor<2x3x2xi32>
  // CHECK: graph.moe_route_grad %{{.*}}, %[[E]], %[[W]] top_k 2 : tensor<2x3x4xf32>, tensor<2x3x2xi32>, tensor<2x3x2xf32>
  %dl = graph.moe_route_grad %logits, %experts, %weights top_k 2 : tensor<2x3x4xf32>, tensor<2x3x2xi32>, tensor<2x3x2xf32>
  // CHECK: graph.expert_counts %[[E]] experts 4 : tensor<2x3x2xi32>
  %counts = graph.expert_counts %experts experts 4 : tensor<2x3x2xi32>
  return %y, %dw, %dl, %counts : tensor<2x3x2x8xf32>, tensor<4x6x8xf32>, tensor<2x3x4xf32>, tensor<4xf32>
}
