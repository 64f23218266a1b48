// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-apply-preset="tp=2" | FileCheck %s

// Tests that the Megatron preset splits a projection by the features the
// forward reads, whatever layout its name suggests: GPT-2's names on
// nn.Linear weights (nanoGPT: [out, in], read transposed; the fused QKV held
// as [3, E, E]) split their output rows (c_fc, c_attn by heads) and input
// columns (c_proj), and on Conv1D weights ([in, out]) the other dimensions.
// The first matmul in block order decides (the forward's, not the
// gradient's after it); reshapes, slices and casts are looked through.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<3x4x4xf32> {graph.param = "transformer.h.0.attn.c_attn.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}, {}]>}
// CHECK-SAME: tensor<8x4xf32> {graph.param = "transformer.h.0.mlp.c_fc.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}
// CHECK-SAME: tensor<8x4xf32> {graph.param = "transformer.h.0.mlp.c_fc.weight", graph.role = "adam_m", trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}
// CHECK-SAME: tensor<4x8xf32> {graph.param = "transformer.h.0.mlp.c_proj.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}
// CHECK-SAME: tensor<4x8xf32> {graph.param = "transformer.h.1.mlp.c_fc.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}
// CHECK-SAME: tensor<8x4xf32> {graph.param = "transformer.h.1.mlp.c_proj.weight", graph.role = "param", trellis.sharding = #trellis.sharding<@mesh, [{"tp"}, {}]>}
func.func @train_step(%qkv: tensor<3x4x4xf32> {graph.role = "param", graph.param = "transformer.h.0.attn.c_attn.weight"},
                      %fc: tensor<8x4xf32> {graph.role = "param", graph.param = "transformer.h.0.mlp.c_fc.weight"},
                      %fc_m: tensor<8x4xf32> {graph.role = "adam_m", graph.param = "transformer.h.0.mlp.c_fc.weight"},
                      %proj: tensor<4x8xf32> {graph.role = "param", graph.param = "transformer.h.0.mlp.c_proj.weight"},
                      %conv_fc: tensor<4x8xf32> {graph.role = "param", graph.param = "transformer.h.1.mlp.c_fc.weight"},
                      %conv_proj: tensor<8x4xf32> {graph.role = "param", graph.param = "transformer.h.1.mlp.c_proj.weight"},
                      %x: tensor<2x4xf32>, %dy: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %slice = graph.slice %qkv offsets [0, 0, 0] sizes [1, 4, 4] : tensor<3x4x4xf32>
  %q = graph.reshape %slice to [4, 4] : tensor<1x4x4xf32>
  %qx = graph.matmul %x, %q transposed : tensor<2x4xf32>, tensor<4x4xf32>
  %h = graph.matmul %qx, %fc transposed : tensor<2x4xf32>, tensor<8x4xf32>
  %y = graph.matmul %h, %proj transposed : tensor<2x8xf32>, tensor<4x8xf32>
  // The gradient's matmul reads the weight untransposed, after the forward.
  %dx = graph.matmul %dy, %fc : tensor<2x8xf32>, tensor<8x4xf32>
  %h1 = graph.matmul %y, %conv_fc : tensor<2x4xf32>, tensor<4x8xf32>
  %y1 = graph.matmul %h1, %conv_proj : tensor<2x8xf32>, tensor<8x4xf32>
  return %y1 : tensor<2x4xf32>
}

// -----

// Tests that a fused QKV held whole ([3E, E]) is refused rather than split
// across its pieces' heads.
// expected-error @+1 {{the Megatron layout splits "transformer.h.0.attn.c_attn.weight" as a fused QKV weight held as [E, 3, E] (Conv1D) or [3, E, E] (nn.Linear) (rank 3), found 'tensor<12x4xf32>': a weight of another layout under that name cannot be split by heads; train this model with dp, pp or ZeRO instead of tp}}
func.func @train_step(%qkv: tensor<12x4xf32> {graph.role = "param", graph.param = "transformer.h.0.attn.c_attn.weight"}) -> tensor<12x4xf32> {
  return %qkv : tensor<12x4xf32>
}
