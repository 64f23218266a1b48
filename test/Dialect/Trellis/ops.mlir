// RUN: trellis-opt %s | trellis-opt | FileCheck %s
// RUN: trellis-opt %s --mlir-print-op-generic | trellis-opt | FileCheck %s

// Tests that meshes, shardings and every collective print and parse back.

// CHECK: trellis.mesh @mesh = <["dp"=2, "pp"=2, "tp"=4]>
trellis.mesh @mesh = <["dp"=2, "pp"=2, "tp"=4]>
// CHECK: trellis.mesh @roles = <["rows":data=2, "tp":data=2, "ep"=2]>
trellis.mesh @roles = <["rows":data=2, "tp":data=2, "ep":expert=2]>
// CHECK: trellis.mesh @line = <["x"=1]>
trellis.mesh @line = <["x"=1]>

// A split that does not divide is legal where trellis.padded names the
// whole shape (the last pieces are padded).
// CHECK-LABEL: func.func @padded
// CHECK-SAME: {trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"tp"}]>}
// CHECK: trellis.shard %{{.*}} <@mesh, [{"dp"}]> {trellis.padded = array<i64: 5>} : tensor<5xf32>
func.func @padded(%arg0: tensor<6xf32> {trellis.padded = array<i64: 6>, trellis.sharding = #trellis.sharding<@mesh, [{"tp"}]>}, %arg1: tensor<5xf32>) {
  %0 = trellis.shard %arg1 <@mesh, [{"dp"}]> {trellis.padded = array<i64: 5>} : tensor<5xf32>
  return
}

// CHECK-LABEL: func.func @annotations
// CHECK-SAME: {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {"tp"}]>}
// CHECK-SAME: -> (tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {}], partial<sum>={"tp"}>})
func.func @annotations(
    %arg0: tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{"dp"}, {"tp"}]>})
    -> (tensor<8x16xf32> {trellis.sharding = #trellis.sharding<@mesh, [{}, {}], partial<sum>={"tp"}>}) {
  // CHECK: trellis.shard %{{.*}} <@mesh, [{"dp", ?}, {"tp"}], partial<max>={"pp"}> : tensor<8x16xf32>
  %0 = trellis.shard %arg0 <@mesh, [{"dp", ?}, {"tp"}], partial<max>={"pp"}> : tensor<8x16xf32>
  // CHECK: trellis.shard %{{.*}} <@mesh, [{?}, {}]> : tensor<8x16xf32>
  %1 = trellis.shard %0 <@mesh, [{?}, {}]> : tensor<8x16xf32>
  // CHECK: trellis.shard %{{.*}} <@mesh, [{"tp", "dp"}, {}], partial<min>={"pp"}> : tensor<8x16xf32>
  %2 = trellis.shard %1 <@mesh, [{"tp", "dp"}, {}], partial<min>={"pp"}> : tensor<8x16xf32>
  // CHECK: trellis.shard %{{.*}} <@line, [{"x"}, {}]> : tensor<8x16xf32>
  %3 = trellis.shard %2 <@line, [{"x"}, {}]> : tensor<8x16xf32>
  return %3 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%arg0: tensor<8x16xf32>, %arg1: tensor<2x16x8xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[SUM:.*]] = trellis.all_reduce %{{.*}} over @mesh ["tp"] sum : tensor<8x16xf32>
  %0 = trellis.all_reduce %arg0 over @mesh ["tp"] sum : tensor<8x16xf32>
  // CHECK: trellis.all_reduce %[[SUM]] over @mesh ["dp", "tp"] max : tensor<8x16xf32>
  %1 = trellis.all_reduce %0 over @mesh ["dp", "tp"] max : tensor<8x16xf32>
  // CHECK: trellis.all_gather %{{.*}} over @mesh ["tp"] dim 1 : tensor<8x16xf32> -> tensor<8x64xf32>
  %2 = trellis.all_gather %1 over @mesh ["tp"] dim 1 : tensor<8x16xf32> -> tensor<8x64xf32>
  // CHECK: trellis.reduce_scatter %{{.*}} over @mesh ["dp", "tp"] dim 0 min : tensor<8x16xf32> -> tensor<1x16xf32>
  %3 = trellis.reduce_scatter %1 over @mesh ["dp", "tp"] dim 0 min : tensor<8x16xf32> -> tensor<1x16xf32>
  // CHECK: trellis.all_to_all %{{.*}} over @mesh ["tp"] split 2 concat 1 : tensor<2x16x8xf32> -> tensor<2x64x2xf32>
  %4 = trellis.all_to_all %arg1 over @mesh ["tp"] split 2 concat 1 : tensor<2x16x8xf32> -> tensor<2x64x2xf32>
  // CHECK: trellis.all_to_all %{{.*}} over @mesh ["pp"] split 1 concat 1 : tensor<2x16x8xf32> -> tensor<2x16x8xf32>
  %5 = trellis.all_to_all %arg1 over @mesh ["pp"] split 1 concat 1 : tensor<2x16x8xf32> -> tensor<2x16x8xf32>
  // CHECK: trellis.broadcast %{{.*}} over @mesh ["dp"] root 1 : tensor<8x16xf32>
  %6 = trellis.broadcast %1 over @mesh ["dp"] root 1 : tensor<8x16xf32>
  // CHECK: trellis.collective_permute %{{.*}} over @mesh ["tp"] shift -1 : tensor<8x16xf32>
  %7 = trellis.collective_permute %6 over @mesh ["tp"] shift -1 : tensor<8x16xf32>
  return %7 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @point_to_point
func.func @point_to_point(%arg0: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  // CHECK: trellis.send %{{.*}} to @mesh ["pp"] peer 1 channel 3 : tensor<4x8xbf16>
  trellis.send %arg0 to @mesh ["pp"] peer 1 channel 3 : tensor<4x8xbf16>
  // CHECK: trellis.recv from @mesh ["pp"] peer 1 channel 4 : tensor<4x8xbf16>
  %0 = trellis.recv from @mesh ["pp"] peer 1 channel 4 : tensor<4x8xbf16>
  return %0 : tensor<4x8xbf16>
}

// Tests that in a partitioned function argument shardings describe local
// shards: a local size of 1 split over dp=4 is fine.
trellis.mesh @mesh4 = <["dp"=4]>
// CHECK-LABEL: func.func @partitioned
// CHECK-SAME: attributes {trellis.partitioned}
func.func @partitioned(%arg0: tensor<1x8xi32> {trellis.sharding = #trellis.sharding<@mesh4, [{"dp"}, {}]>}) attributes {trellis.partitioned} {
  return
}
