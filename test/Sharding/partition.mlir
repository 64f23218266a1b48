// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-propagate-shardings,trellis-partition))' | FileCheck %s

// Tests that a contracted split leaves a partial product, which an all_reduce
// completes before the replicated result leaves the function.
trellis.mesh @mesh = <["x"=2, "y"=4]>
// CHECK-LABEL: func.func @partial_to_replicated
// CHECK-SAME: %[[A:.*]]: tensor<8x4xf32> {{.*}}, %[[B:.*]]: tensor<4x16xf32>
// CHECK-SAME: -> tensor<8x16xf32> attributes {trellis.partitioned}
func.func @partial_to_replicated(
    %a: tensor<8x8xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  // CHECK: %[[P:.*]] = graph.matmul %[[A]], %[[B]] : tensor<8x4xf32>, tensor<4x16xf32>
  // CHECK: %[[R:.*]] = trellis.all_reduce %[[P]] over @mesh ["x"] sum : tensor<8x16xf32>
  // CHECK: return %[[R]]
  %0 = graph.matmul %a, %b : tensor<8x8xf32>, tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a partial value whose user wants it split along the same axis gets
// a reduce_scatter.
trellis.mesh @mesh = <["x"=2]>
// CHECK-LABEL: func.func @partial_to_split
func.func @partial_to_split(
    %a: tensor<8x8xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>},
    %c: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  // CHECK: %[[P:.*]] = graph.matmul {{.*}} : tensor<8x4xf32>, tensor<4x16xf32>
  // CHECK: %[[S:.*]] = trellis.reduce_scatter %[[P]] over @mesh ["x"] dim 0 sum : tensor<8x16xf32> -> tensor<4x16xf32>
  // CHECK: graph.add %[[S]], %{{.*}} : tensor<4x16xf32>, tensor<4x16xf32>
  // CHECK-NOT: trellis.all_reduce
  %0 = graph.matmul %a, %b : tensor<8x8xf32>, tensor<8x16xf32>
  %1 = graph.add %0, %c : tensor<8x16xf32>, tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

// Tests that a split dimension an op needs whole is gathered.
trellis.mesh @mesh = <["x"=4]>
// CHECK-LABEL: func.func @split_to_whole
func.func @split_to_whole(
    %a: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>}) -> tensor<8x16xf32> {
  // CHECK: %[[G:.*]] = trellis.all_gather %{{.*}} over @mesh ["x"] dim 1 : tensor<8x4xf32> -> tensor<8x16xf32>
  // CHECK: graph.softmax %[[G]] : tensor<8x16xf32>
  %0 = graph.softmax %a : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a split moving to another dimension is one all_to_all.
trellis.mesh @mesh = <["x"=2]>
// CHECK-LABEL: func.func @split_to_other_dim
func.func @split_to_other_dim(
    %a: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  // CHECK: %[[T:.*]] = trellis.all_to_all %{{.*}} over @mesh ["x"] split 1 concat 0 : tensor<4x16xf32> -> tensor<8x8xf32>
  // CHECK: graph.add %{{.*}}, %[[T]] : tensor<8x8xf32>, tensor<8x8xf32>
  %0 = graph.add %a, %b : tensor<8x16xf32>, tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a replicated operand meeting a split one keeps its own piece,
// without communication.
trellis.mesh @mesh = <["x"=2]>
// CHECK-LABEL: func.func @replicated_to_split
func.func @replicated_to_split(
    %a: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  // CHECK: %[[S:.*]] = trellis.slice_shard %{{.*}} over @mesh ["x"] dim 0 : tensor<8x16xf32> -> tensor<4x16xf32>
  // CHECK: graph.add %[[S]], %{{.*}} : tensor<4x16xf32>, tensor<4x16xf32>
  // CHECK: trellis.all_gather %{{.*}} over @mesh ["x"] dim 0 : tensor<4x16xf32> -> tensor<8x16xf32>
  %0 = graph.add %a, %b : tensor<8x16xf32>, tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that a split over two axes is gathered back minor axis first, and the
// attributes that encode global sizes (reshape shape, loss normalizer)
// rewritten for the local program.
trellis.mesh @mesh = <["x"=2, "y"=2]>
// CHECK-LABEL: func.func @two_axes_and_local_attributes
func.func @two_axes_and_local_attributes(
    %ids: tensor<8x4xi32> {trellis.sharding = #trellis.sharding<@mesh, [{"x", "y"}, {}]>},
    %logits: tensor<8x4x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x", "y"}, {}, {}]>}) -> (tensor<f32>, tensor<32x16xf32>) {
  // CHECK: graph.cross_entropy %{{.*}}, %{{.*}} {normalizer = 32 : i64} : tensor<2x4x16xf32>, tensor<2x4xi32>
  %loss = graph.cross_entropy %logits, %ids : tensor<8x4x16xf32>, tensor<8x4xi32>
  // CHECK: %[[R:.*]] = graph.reshape %{{.*}} to [8, 16] : tensor<2x4x16xf32>
  // CHECK: trellis.all_reduce %{{.*}} over @mesh ["x", "y"] sum : tensor<f32>
  // CHECK: %[[GY:.*]] = trellis.all_gather %[[R]] over @mesh ["y"] dim 0 : tensor<8x16xf32> -> tensor<16x16xf32>
  // CHECK: trellis.all_gather %[[GY]] over @mesh ["x"] dim 0 : tensor<16x16xf32> -> tensor<32x16xf32>
  %flat = graph.reshape %logits to [32, 16] : tensor<8x4x16xf32>
  return %loss, %flat : tensor<f32>, tensor<32x16xf32>
}

// -----

// Tests that partial sums pass through linear ops (add, reshape): the two
// contracted products are summed locally and reduced once.
trellis.mesh @mesh = <["x"=2]>
// CHECK-LABEL: func.func @partials_through_linear_ops
func.func @partials_through_linear_ops(
    %a: tensor<8x8xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>},
    %c: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<128xf32> {
  // CHECK: %[[P:.*]] = graph.matmul
  // CHECK: %[[Q:.*]] = graph.matmul
  // CHECK: %[[S:.*]] = graph.add %[[P]], %[[Q]] : tensor<8x16xf32>, tensor<8x16xf32>
  // CHECK: %[[F:.*]] = graph.reshape %[[S]] to [128] : tensor<8x16xf32>
  // CHECK: trellis.all_reduce %[[F]] over @mesh ["x"] sum : tensor<128xf32>
  // CHECK-NOT: trellis.all_reduce
  %0 = graph.matmul %a, %b : tensor<8x8xf32>, tensor<8x16xf32>
  %1 = graph.matmul %a, %c : tensor<8x8xf32>, tensor<8x16xf32>
  %2 = graph.add %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
  %3 = graph.reshape %2 to [128] : tensor<8x16xf32>
  return %3 : tensor<128xf32>
}

// -----

// Tests that the collectives made for an op of a micro-batch run in the op's
// phase (they carry its mark) and that, in a step of micro-batches
// (graph.micro_batches), every value keeps its layout (trellis.layout) for the
// pipeline split.
trellis.mesh @mesh = <["x"=2]>
// CHECK-LABEL: func.func @keeps_pipeline_marks
func.func @keeps_pipeline_marks(
    %a: tensor<8x8xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {"x"}]>},
    %b: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32>
    attributes {graph.micro_batches = 2 : i64} {
  // CHECK: %[[P:.*]] = graph.matmul {{.*}} {graph.phase = "backward", trellis.layout = #trellis.sharding<@mesh, [{}, {}], partial<sum>={"x"}>}
  // CHECK: %[[R:.*]] = trellis.all_reduce %[[P]] over @mesh ["x"] sum {graph.phase = "backward", trellis.layout = #trellis.sharding<@mesh, [{}, {}]>}
  // CHECK: graph.exp %[[R]] {graph.phase = "backward", trellis.layout = #trellis.sharding<@mesh, [{}, {}]>}
  %0 = graph.matmul %a, %b {graph.phase = "backward"} : tensor<8x8xf32>, tensor<8x16xf32>
  %1 = graph.exp %0 {graph.phase = "backward"} : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
