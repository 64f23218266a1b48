// RUN: not trellis-opt %s -split-input-file -trellis-apply-expert-parallel 2>&1 | FileCheck %s
// RUN: not trellis-opt %s -split-input-file -trellis-apply-expert-parallel="function=step" 2>&1 | FileCheck %s --check-prefix=NO-STEP

// Tests what expert parallelism refuses: an expert weight that is not a
// parameter, and one split already.
// NO-STEP: error: expected a training step @step to split over experts, found none

// CHECK: error: 'graph.expert_matmul' op splits its experts over ep: expected its weight to be a parameter (through casts, slices of every expert and reshapes keeping the experts first), found graph.scale
trellis.mesh @mesh = <["ep"=2]>
func.func @train_step(%w: tensor<4x6x8xf32> {graph.role = "param", graph.param = "experts.*.w"},
                      %x: tensor<4x8xf32> {graph.role = "input", graph.param = "x"},
                      %ids: tensor<4x2xi32> {graph.role = "input", graph.param = "ids"}) -> tensor<4x2x6xf32> {
  %scaled = graph.scale %w by 2.0 : tensor<4x6x8xf32>
  %h = graph.expert_matmul %x, %scaled transposed, %ids : tensor<4x8xf32>, tensor<4x6x8xf32>, tensor<4x2xi32>
  return %h : tensor<4x2x6xf32>
}

// -----

// CHECK: error: expert weight "experts.*.w" is split already (#trellis.sharding<@mesh, [{}, {"ep"}, {}]>): expert parallelism splits it along its experts over ep
trellis.mesh @mesh = <["ep"=2]>
func.func @train_step(%w: tensor<4x6x8xf32> {graph.role = "param", graph.param = "experts.*.w", trellis.sharding = #trellis.sharding<@mesh, [{}, {"ep"}, {}]>},
                      %x: tensor<4x8xf32> {graph.role = "input", graph.param = "x"},
                      %ids: tensor<4x2xi32> {graph.role = "input", graph.param = "ids"}) -> tensor<4x2x6xf32> {
  %h = graph.expert_matmul %x, %w transposed, %ids : tensor<4x8xf32>, tensor<4x6x8xf32>, tensor<4x2xi32>
  return %h : tensor<4x2x6xf32>
}
