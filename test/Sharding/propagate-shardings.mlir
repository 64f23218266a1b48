// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings))' | FileCheck %s
// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings{explain=true}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// Tests that shardings propagate forward through elementwise ops and matmul
// (the batch factor), and that reductions over a split dimension leave partial
// sums (reduce_sum) or partial maxima (reduce_max).
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @forward_through_ops
func.func @forward_through_ops(
    %x: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>},
    %w: tensor<16x32xf32>) -> (tensor<f32>, tensor<32xf32>) {
  // CHECK: graph.matmul {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{"dp"}, {}]>]}
  %0 = graph.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32>
  // CHECK: graph.gelu {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{"dp"}, {}]>]}
  %1 = graph.gelu %0 : tensor<8x32xf32>
  // CHECK: graph.reduce_sum {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [], partial<sum>={"dp"}>]}
  %2 = graph.reduce_sum %1 dims [0, 1] : tensor<8x32xf32>
  // CHECK: graph.reduce_max {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}], partial<max>={"dp"}>]}
  %3 = graph.reduce_max %1 dims [0] : tensor<8x32xf32>
  return %2, %3 : tensor<f32>, tensor<32xf32>
}
// EXPLAIN: remark: split f0 over "dp"

// -----

// Tests that shardings propagate backward: an annotation on a later value
// reaches the unannotated argument and the ops before it.
trellis.mesh @mesh = <["tp"=4]>
// CHECK-LABEL: func.func @backward_to_arguments
// CHECK-SAME: %{{.*}}: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}
func.func @backward_to_arguments(
    %x: tensor<8x16xf32>,
    %y: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}) -> tensor<8x16xf32> {
  // CHECK: graph.exp {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {"tp"}]>]}
  %0 = graph.exp %x : tensor<8x16xf32>
  %1 = graph.mul %0, %y : tensor<8x16xf32>, tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

// Tests that a dimension an op needs whole (softmax's last) does not take the
// split, and that --explain names a large value that stays replicated.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @whole_factor
func.func @whole_factor(
    %x: tensor<512x1024xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"tp"}]>}) -> tensor<512x1024xf32> {
  // CHECK: graph.softmax {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {}]>]}
  %0 = graph.softmax %x : tensor<512x1024xf32>
  return %0 : tensor<512x1024xf32>
}
// EXPLAIN: remark: no factor split; a result of 2 MiB stays replicated

// -----

// Tests that a size the axis does not divide stays whole: [8, 6] -> [2, 24]
// shares the leading factor, but 2 rows cannot be split 4 ways.
trellis.mesh @mesh = <["dp"=4]>
// CHECK-LABEL: func.func @not_divisible
func.func @not_divisible(
    %x: tensor<8x6xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {}]>}) -> tensor<2x24xf32> {
  // CHECK: graph.transpose {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {"dp"}]>]}
  %0 = graph.transpose %x perm [1, 0] : tensor<8x6xf32>
  // CHECK: graph.reshape {{.*}} {trellis.result_shardings = [#trellis.sharding<@mesh, [{}, {}]>]}
  %1 = graph.reshape %x to [2, 24] : tensor<8x6xf32>
  return %1 : tensor<2x24xf32>
}
