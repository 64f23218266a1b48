// RUN: trellis-opt %s -trellis-autodiff="optimizer=sgd" -trellis-sharding-pipeline="dp=2" | FileCheck %s

// Tests that the sharding phase runs as one registered pipeline: the data-
// parallel preset splits the input's batch, propagation and partitioning make
// the loss and the weight gradient partial, and the bucketing reduces the
// gradient in its bucket before the update and the loss alone (a forward-
// only evaluation reduces it without any gradient); the loss's reduction is
// issued before the update, which runs beside it (collective scheduling).
// CHECK: trellis.mesh @mesh = <["dp"=2, "tp"=1]>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<1x4xf32> {{{.*}}trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: attributes {trellis.partitioned}
// CHECK: trellis.all_reduce {{.*}} over @mesh ["dp"] sum : tensor<4x3xf32>
// CHECK-NEXT: trellis.all_reduce {{.*}} over @mesh ["dp"] sum : tensor<f32>
// CHECK-NEXT: graph.sgd
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32>
  %loss = graph.reduce_sum %y dims [0, 1] : tensor<2x3xf32>
  return %loss : tensor<f32>
}
