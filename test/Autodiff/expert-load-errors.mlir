// RUN: not trellis-opt %s -trellis-expert-load 2>&1 | FileCheck %s

// Layers of different expert counts have no one [layers, experts] load.
// CHECK: error: 'graph.moe_route' op routes over 6 experts, another layer over 4: expected one expert count for the expert_load metric
func.func @train_step(%x: tensor<2x3x8xf32> {graph.role = "input", graph.param = "x"},
                      %a: tensor<8x4xf32> {graph.role = "param", graph.param = "a"},
                      %b: tensor<8x6xf32> {graph.role = "param", graph.param = "b"}) -> tensor<f32> {
  %la = graph.matmul %x, %a : tensor<2x3x8xf32>, tensor<8x4xf32>
  %wa, %ea = graph.moe_route %la top_k 2 : tensor<2x3x4xf32>
  %lb = graph.matmul %x, %b : tensor<2x3x8xf32>, tensor<8x6xf32>
  %wb, %eb = graph.moe_route %lb top_k 2 : tensor<2x3x6xf32>
  %sum = graph.reduce_sum %wa dims [0, 1, 2] : tensor<2x3x2xf32>
  return %sum : tensor<f32>
}
