// RUN: not trellis-opt %s -trellis-expert-bias-update 2>&1 | FileCheck %s

// Tests that the update needs a router with a state bias.
// CHECK: error: the expert bias update moves routers' score biases: expected a graph.moe_route whose bias is a state argument (DeepSeek-V3's e_score_correction_bias), found none
func.func @train_step(%x: tensor<2x3x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %weights, %experts = graph.moe_route %x top_k 2 : tensor<2x3x4xf32>
  %sum = graph.reduce_sum %weights dims [0, 1, 2] : tensor<2x3x2xf32>
  return %sum : tensor<f32>
}
