// RUN: trellis-opt %s -split-input-file -verify-diagnostics

// Tests that operands that do not broadcast are rejected.
func.func @no_broadcast(%a: tensor<3x4xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{operands of shapes [3, 4] and [3] do not broadcast}}
  %0 = graph.add %a, %b : tensor<3x4xf32>, tensor<3xf32>
  return
}

// -----

// Tests that matmul needs matching contracting sizes.
func.func @matmul_contracting(%a: tensor<3x4xf32>, %b: tensor<5x6xf32>) {
  // expected-error @+1 {{contracting sizes differ: lhs [3, 4] has 4, rhs [5, 6] has 5}}
  %0 = graph.matmul %a, %b : tensor<3x4xf32>, tensor<5x6xf32>
  return
}

// -----

// Tests that matmul needs equal batch dimensions.
func.func @matmul_batch(%a: tensor<2x3x4xf32>, %b: tensor<3x4x5xf32>) {
  // expected-error @+1 {{expected rhs batch dimensions [2], found [3]}}
  %0 = graph.matmul %a, %b : tensor<2x3x4xf32>, tensor<3x4x5xf32>
  return
}

// -----

// Tests that a reshape keeps the element count.
func.func @reshape_count(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{cannot reshape [2, 3] (6 elements) to [4, 2]}}
  %0 = graph.reshape %a to [4, 2] : tensor<2x3xf32>
  return
}

// -----

// Tests that a transpose needs a permutation.
func.func @transpose_perm(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{expected a permutation of 2 dimensions, found [0, 0]}}
  %0 = graph.transpose %a perm [0, 0] : tensor<2x3xf32>
  return
}

// -----

// Tests that a slice stays inside its input.
func.func @slice_bounds(%a: tensor<4x5xf32>) {
  // expected-error @+1 {{slice [3, 6) of dimension 1 is outside [0, 5)}}
  %0 = graph.slice %a offsets [0, 3] sizes [4, 3] : tensor<4x5xf32>
  return
}

// -----

// Tests that reduced dimensions are increasing and in range.
func.func @reduce_dims(%a: tensor<4x5xf32>) {
  // expected-error @+1 {{expected reduced dimensions in [0, 2), found 2}}
  %0 = graph.reduce_sum %a dims [2] : tensor<4x5xf32>
  return
}

// -----

// Tests that layer_norm needs per-feature vectors.
func.func @layer_norm_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{expected weight of shape [8] (the last dimension of the input), found [4]}}
  %0 = graph.layer_norm %x, %w, %w eps 1.0e-5 : tensor<2x8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that epsilon must be positive.
func.func @layer_norm_epsilon(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected epsilon > 0, found 0}}
  %0 = graph.rms_norm %x, %w eps 0.0 : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

// Tests that kv heads must divide query heads.
func.func @attention_heads(%q: tensor<1x4x6x8xf32>, %kv: tensor<1x4x4x8xf32>) {
  // expected-error @+1 {{expected kv heads (4) to divide query heads (6)}}
  %0 = graph.attention %q, %kv, %kv scale 1.0 : tensor<1x4x6x8xf32>, tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that a sliding window holds at least one position and is causal, and
// that a soft-cap is positive.
func.func @attention_window(%q: tensor<1x4x2x8xf32>) {
  // expected-error @+1 {{expected window >= 1 (the positions each query sees), found 0}}
  %0 = graph.attention %q, %q, %q scale 1.0 {window = 0 : i64} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  return
}

// -----

func.func @attention_window_causal(%q: tensor<1x4x2x8xf32>) {
  // expected-error @+1 {{expected causal attention with a sliding window (each query sees the window's positions up to its own), found causal = false}}
  %0 = graph.attention %q, %q, %q scale 1.0 {causal = false, window = 2 : i64} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  return
}

// -----

func.func @attention_softcap(%q: tensor<1x4x2x8xf32>) {
  // expected-error @+1 {{expected softcap > 0, found -1.000000}}
  %0 = graph.attention_grad %q, %q, %q, %q scale 1.0 {softcap = -1.0} : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  return
}

// -----

// Tests that ALiBi's slopes and the sinks are one per query head, in the
// query's element type.
func.func @attention_sinks_shape(%q: tensor<1x4x2x8xf32>, %sinks: tensor<4xf32>) {
  // expected-error @+1 {{expected sinks of shape [2] (one per query head) in the query's f32, found [4] (f32)}}
  %0 = graph.attention %q, %q, %q sinks %sinks : tensor<4xf32> scale 1.0 : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>
  return
}

// -----

func.func @attention_slopes_type(%q: tensor<1x4x2x8xbf16>, %slopes: tensor<2xf32>) {
  // expected-error @+1 {{expected slopes of element type bf16 (that of query), found f32}}
  %0 = graph.attention %q, %q, %q slopes %slopes : tensor<2xf32> scale 1.0 : tensor<1x4x2x8xbf16>, tensor<1x4x2x8xbf16>
  return
}

// -----

// Tests that a constant holds one value per element.
func.func @constant_count() {
  // expected-error @+1 {{expected 3 values (shape [3]), found 2}}
  %0 = graph.constant [1.0, 2.0] shape [3]
  return
}

// -----

func.func @constant_size() {
  // expected-error @+1 {{expected at most 512 values in a constant (larger ones are parameters or states), found 513}}
  %0 = graph.constant [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0] shape [513]
  return
}

// -----

// Tests that rope needs half a head dimension of frequencies.
func.func @rope_frequencies(%x: tensor<1x4x2x8xf32>) {
  // expected-error @+1 {{expected 4 frequencies (half the head dimension), found 2}}
  %0 = graph.rope %x frequencies [1.0, 0.5] : tensor<1x4x2x8xf32>
  return
}

// -----

// Tests that targets must match the logits without their class dimension.
func.func @cross_entropy_targets(%l: tensor<2x8x32xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{expected targets of shape [2, 8] (logits [2, 8, 32] without the class dimension), found [2, 4]}}
  %0 = graph.cross_entropy %l, %t : tensor<2x8x32xf32>, tensor<2x4xi32>
  return
}

// -----

// Tests that AdamW betas lie in [0, 1).
func.func @adamw_betas(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{expected betas in [0, 1), found 1 and 0.999}}
  %0:3 = graph.adamw %p, %p, %p, %p, %s {learning_rate = 1.0e-3, beta1 = 1.0, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
  return
}

// -----

// Tests that an AdamW schedule is one the formulas define.
func.func @adamw_schedule(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{expected lr_schedule constant, linear, cosine or wsd, found 'step'}}
  %0:3 = graph.adamw %p, %p, %p, %p, %s {learning_rate = 1.0e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0, lr_schedule = "step"} : tensor<4xf32>
  return
}

// -----

// Tests that an AdamW schedule's decay ends after its warmup.
func.func @adamw_schedule_steps(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{--decay-steps: expected the step the decay ends at, after the 4 warmup steps, found 3}}
  %0:3 = graph.adamw %p, %p, %p, %p, %s {learning_rate = 1.0e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0, lr_schedule = "cosine", warmup_steps = 4, decay_steps = 3} : tensor<4xf32>
  return
}

// -----

// Tests that a generic form missing a required attribute is an error, not a crash.
func.func @missing_attribute(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'graph.reshape' op requires attribute 'shape'}}
  %0 = "graph.reshape"(%a) : (tensor<2x3xf32>) -> tensor<6xf32>
  return
}

// -----

// Tests that token ids must be i32.
func.func @embedding_ids(%t: tensor<8x4xf32>, %ids: tensor<2xf32>) {
  // expected-error @+1 {{'graph.embedding' op operand #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = "graph.embedding"(%t, %ids) : (tensor<8x4xf32>, tensor<2xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that a model part must be one of the three kinds.
func.func @unknown_part_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{expected a model part (embedding, layer N or head), found 'block'}}
  %0 = graph.neg %x {graph.part = #graph.part<block 3>} : tensor<4xf32>
  return
}

// -----

// Tests that a layer's index is not negative.
func.func @negative_layer(%x: tensor<4xf32>) {
  // expected-error @+1 {{expected a layer index >= 0, found -1}}
  %0 = graph.neg %x {graph.part = #graph.part<layer -1>} : tensor<4xf32>
  return
}

// -----

// Tests that graph.part holds a #graph.part, not a name.
func.func @part_as_name(%x: tensor<4xf32>) {
  // expected-error @+1 {{'graph.neg' op expected 'graph.part' to be a #graph.part, found "layers.0"}}
  %0 = graph.neg %x {graph.part = "layers.0"} : tensor<4xf32>
  return
}

// -----

// Tests that a step runs at least one micro-batch.
// expected-error @+1 {{'func.func' op expected 'graph.micro_batches' to be an integer >= 1, found 0 : i64}}
func.func @no_micro_batches(%x: tensor<4xf32>) attributes {graph.micro_batches = 0 : i64} {
  return
}

// -----

// Tests that only an op computing in the compute dtype can be kept in fp32.
func.func @kept_precision(%x: tensor<4xf32>) {
  // expected-error @+1 {{'graph.neg' op expected 'graph.precision' to be "f32" on an op that computes in the compute dtype, found "f64"}}
  %0 = graph.neg %x {graph.precision = "f64"} : tensor<4xf32>
  return
}

// -----

// Tests that a phase mark names a phase of a micro-batch.
func.func @unknown_phase(%x: tensor<4xf32>) {
  // expected-error @+1 {{'graph.neg' op expected 'graph.phase' to be "forward", "backward" or "weight", found "sideways"}}
  %0 = graph.neg %x {graph.phase = "sideways"} : tensor<4xf32>
  return
}

// -----

// Tests that graph.reduce_first marks casts only.
func.func @reduce_first_on_an_add(%x: tensor<4xf32>) {
  // expected-error @+1 {{'graph.add' op expected 'graph.reduce_first' to be a unit attribute of a graph.cast}}
  %0 = graph.add %x, %x {graph.reduce_first} : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// Tests that a cast names a float element type.
func.func @cast_to_an_integer(%x: tensor<4xf32>) {
  // expected-error @+1 {{expected a cast to f32, bf16 or f16, found 'i32'}}
  %0 = graph.cast %x to "i32" : tensor<4xf32>
  return
}

// -----

// Tests that an op's float operands share one element type.
func.func @mixed_operands(%x: tensor<4xf32>, %y: tensor<4xbf16>) {
  // expected-error @+1 {{expected rhs of element type f32 (that of lhs), found bf16}}
  %0 = graph.add %x, %y : tensor<4xf32>, tensor<4xbf16>
  return
}

// -----

// Tests that a fused program names slots that exist.
func.func @fused_slot_out_of_range(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+2 {{instruction 1 'mul %2 %3': expected a slot %0 ... %2, found '%3'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.fused_elementwise %x, %y ["add %0 %1", "mul %2 %3"] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a fused program's ops are elementwise ones.
func.func @fused_unknown_op(%x: tensor<4xf32>) {
  // expected-error @+2 {{instruction 0 'softmax %0': unknown op 'softmax': expected add, sub, mul, div, maximum, scale, a unary function, unary_grad or cast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.fused_elementwise %x ["softmax %0"] : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a fused binary op's operands share a dtype (a cast would
// convert one).
func.func @fused_mixed_dtypes(%x: tensor<4xf32>, %y: tensor<4xbf16>) {
  // expected-error @+2 {{instruction 0 'add %0 %1': expected operands of one dtype, found f32 and bf16}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.fused_elementwise %x, %y ["add %0 %1"] : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return
}

// -----

// Tests that a router takes at most as many experts as it has.
func.func @route_top_k(%logits: tensor<2x3x4xf32>) {
  // expected-error @+1 {{expected top_k in [1, 4] (the expert count), found 5}}
  %w, %e = graph.moe_route %logits top_k 5 : tensor<2x3x4xf32>
  return
}

// -----

// Tests that a router's scoring is softmax or sigmoid.
func.func @route_scoring(%logits: tensor<2x3x4xf32>) {
  // expected-error @+1 {{expected scoring "softmax" or "sigmoid", found "relu"}}
  %w, %e = graph.moe_route %logits top_k 2 {scoring = "relu"} : tensor<2x3x4xf32>
  return
}

// -----

// Tests that a router's scaling is positive.
func.func @route_scaling(%logits: tensor<2x3x4xf32>) {
  // expected-error @+1 {{expected scaling > 0, found -1.0}}
  %w, %e = graph.moe_route %logits top_k 2 {scaling = -1.0 : f64} : tensor<2x3x4xf32>
  return
}

// -----

// Tests that a router's bias has one entry per expert.
func.func @route_bias(%logits: tensor<2x3x4xf32>, %bias: tensor<3xf32>) {
  // expected-error @+1 {{expected bias of shape [4] (one per expert), found [3]}}
  %w, %e = graph.moe_route %logits bias %bias top_k 2 : tensor<2x3x4xf32>, tensor<3xf32>
  return
}

// -----

// Tests that a router's groups come with how many it keeps.
func.func @route_groups_alone(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected groups and top_groups together, found groups alone}}
  %w, %e = graph.moe_route %logits top_k 2 {groups = 4 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that a router's groups hold two experts or more each.
func.func @route_group_size(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected groups dividing the 8 experts into groups of two or more, found 8}}
  %w, %e = graph.moe_route %logits top_k 2 {groups = 8 : i64, top_groups = 2 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that a group is ranked by its highest or its two highest.
func.func @route_group_top(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected group_top 1 or 2 (a group ranked by its highest or the sum of its two highest), found 3}}
  %w, %e = graph.moe_route %logits top_k 2 {groups = 4 : i64, top_groups = 2 : i64, group_top = 3 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that a group ranking needs groups.
func.func @route_group_top_alone(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected group_top with groups}}
  %w, %e = graph.moe_route %logits top_k 2 {group_top = 1 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that the kept groups hold top_k experts at least.
func.func @route_kept_groups(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected top_k (3) at most the 2 experts of top_groups groups}}
  %w, %e = graph.moe_route %logits top_k 3 {groups = 4 : i64, top_groups = 1 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that a router keeps at most its groups.
func.func @route_top_groups(%logits: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected top_groups in [1, 4], found 5}}
  %w, %e = graph.moe_route %logits top_k 2 {groups = 4 : i64, top_groups = 5 : i64} : tensor<2x3x8xf32>
  return
}

// -----

// Tests that an expert product's rows are a token's or a slot's.
func.func @expert_rows(%x: tensor<2x5x8xf32>, %w: tensor<4x8x6xf32>, %ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{expected lhs of shape [2, 3] + [K] (a row per token) or [2, 3, 2] + [K] (a row per slot), found [2, 5, 8]}}
  %0 = graph.expert_matmul %x, %w, %ids : tensor<2x5x8xf32>, tensor<4x8x6xf32>, tensor<2x3x2xi32>
  return
}

// -----

// Tests that an expert product contracts equal sizes.
func.func @expert_contracting(%x: tensor<2x3x8xf32>, %w: tensor<4x7x6xf32>, %ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{contracting sizes differ: lhs [2, 3, 8] has 8, weight [4, 7, 6] has 7}}
  %0 = graph.expert_matmul %x, %w, %ids : tensor<2x3x8xf32>, tensor<4x7x6xf32>, tensor<2x3x2xi32>
  return
}

// -----

// Tests that the expert weight gradient's result gradient has the slots.
func.func @expert_grad_shape(%x: tensor<2x3x8xf32>, %g: tensor<2x3x6xf32>, %ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{expected result_grad of shape experts [2, 3, 2] + [N], found [2, 3, 6]}}
  %0 = graph.expert_matmul_weight_grad %x, %g, %ids experts 4 : tensor<2x3x8xf32>, tensor<2x3x6xf32>, tensor<2x3x2xi32>
  return
}

// -----

// Tests that an expert product's dispatch is one of the two.
func.func @expert_dispatch(%x: tensor<2x3x8xf32>, %w: tensor<4x8x6xf32>, %ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{expected dispatch "gather" or "all_to_all", found "scatter"}}
  %0 = graph.expert_matmul %x, %w, %ids {axes = ["ep"], dispatch = "scatter"} : tensor<2x3x8xf32>, tensor<4x8x6xf32>, tensor<2x3x2xi32>
  return
}

// -----

// Tests that the all-to-all dispatch names the axes the experts are split
// over.
func.func @expert_dispatch_axes(%x: tensor<2x3x8xf32>, %g: tensor<2x3x2x6xf32>, %ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{expected axes with dispatch "all_to_all" (the ranks the experts are split over)}}
  %0 = graph.expert_matmul_weight_grad %x, %g, %ids experts 4 {dispatch = "all_to_all"} : tensor<2x3x8xf32>, tensor<2x3x2x6xf32>, tensor<2x3x2xi32>
  return
}

// -----

// Tests that expert counts count at least one expert.
func.func @expert_counts_none(%ids: tensor<2x3x2xi32>) {
  // expected-error @+1 {{expected num_experts >= 1, found 0}}
  %0 = graph.expert_counts %ids experts 0 : tensor<2x3x2xi32>
  return
}
