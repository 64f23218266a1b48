// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-bucket-all-reduces))' | FileCheck %s
// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-bucket-all-reduces{bucket-bytes=32}))' | FileCheck %s --check-prefix=SMALL

// Tests that reductions over the same axes fuse into one, placed right after
// the last operand is produced, in the order operands are produced.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @fuse
// SMALL-LABEL: func.func @fuse
func.func @fuse(%a: tensor<4x4xf32>, %b: tensor<8xf32>, %c: tensor<2xf32>) -> (tensor<4x4xf32>, tensor<8xf32>, tensor<2xf32>) {
  // CHECK: %[[GB:.*]] = graph.exp %{{.*}} : tensor<8xf32>
  %gb = graph.exp %b : tensor<8xf32>
  // CHECK: %[[GA:.*]] = graph.exp %{{.*}} : tensor<4x4xf32>
  %ga = graph.exp %a : tensor<4x4xf32>
  // CHECK: %[[FA:.*]] = graph.reshape %[[GA]] to [16] : tensor<4x4xf32>
  // CHECK: %[[CAT:.*]] = graph.concat %[[GB]], %[[FA]] dim 0 : tensor<8xf32>, tensor<16xf32>
  // CHECK: %[[SUM:.*]] = trellis.all_reduce %[[CAT]] over @mesh ["dp"] sum : tensor<24xf32>
  // CHECK: graph.slice %[[SUM]] offsets [0] sizes [8] : tensor<24xf32>
  // CHECK: %[[PA:.*]] = graph.slice %[[SUM]] offsets [8] sizes [16] : tensor<24xf32>
  // CHECK: graph.reshape %[[PA]] to [4, 4] : tensor<16xf32>
  // CHECK-NEXT: graph.neg
  // Max reductions are not fused with sums.
  // CHECK: trellis.all_reduce %{{.*}} over @mesh ["dp"] max : tensor<2xf32>
  %gc = graph.neg %c : tensor<2xf32>
  %x = trellis.all_reduce %ga over @mesh ["dp"] sum : tensor<4x4xf32>
  %y = trellis.all_reduce %gb over @mesh ["dp"] sum : tensor<8xf32>
  %z = trellis.all_reduce %gc over @mesh ["dp"] max : tensor<2xf32>
  return %x, %y, %z : tensor<4x4xf32>, tensor<8xf32>, tensor<2xf32>
}
// With 32-byte buckets each 8- and 16-element reduction fills its own.
// SMALL-COUNT-3: trellis.all_reduce
// SMALL-NOT: graph.concat

// -----

// Tests buckets of a pipelined step (ops marked with their micro-batch): a
// reduction inside a micro-batch stays alone, and gradients of different
// model parts (later cut into different stages) never share a bucket.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @pipelined
// SMALL-LABEL: func.func @pipelined
func.func @pipelined(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK: %[[M:.*]] = trellis.all_reduce {{.*}} {graph.micro_batch = 0 : i64, graph.phase = "forward"} : tensor<4xf32>
  %a = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "forward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %ra = trellis.all_reduce %a over @mesh ["dp"] sum {graph.micro_batch = 0 : i64, graph.phase = "forward"} : tensor<4xf32>
  %g0 = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %h0 = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %g1 = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "backward", graph.part = #graph.part<layer 1>} : tensor<4xf32>
  // CHECK: graph.concat {{.*}} : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: trellis.all_reduce {{.*}} : tensor<8xf32>
  // CHECK-NOT: graph.concat
  // CHECK: return
  %rg0 = trellis.all_reduce %g0 over @mesh ["dp"] sum : tensor<4xf32>
  %rh0 = trellis.all_reduce %h0 over @mesh ["dp"] sum : tensor<4xf32>
  %rg1 = trellis.all_reduce %g1 over @mesh ["dp"] sum : tensor<4xf32>
  return %ra, %rg0, %rh0, %rg1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that in a pipelined step a value of no model part (the loss, a
// tied weight's gradient) is never bucketed with anything.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @pipelined_without_part
// CHECK-NOT: graph.concat
// CHECK: return
func.func @pipelined_without_part(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %b = graph.exp %a : tensor<4xf32>
  %c = graph.exp %x {graph.micro_batch = 0 : i64, graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %ra = trellis.all_reduce %b over @mesh ["dp"] sum : tensor<4xf32>
  %rc = trellis.all_reduce %c over @mesh ["dp"] sum : tensor<4xf32>
  return %ra, %rc : tensor<4xf32>, tensor<4xf32>
}
