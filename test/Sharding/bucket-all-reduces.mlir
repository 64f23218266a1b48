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

// Tests that without per-part the step's reductions of different model
// parts share a bucket, while in a step of micro-batches a reduction inside
// one (marked with its phase) stays alone.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @across_parts
// SMALL-LABEL: func.func @across_parts
// SMALL: graph.concat {{.*}} : tensor<4xf32>, tensor<4xf32>
func.func @across_parts(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {graph.micro_batches = 2 : i64} {
  // CHECK: trellis.all_reduce {{.*}} {graph.phase = "forward"} : tensor<4xf32>
  %a = graph.exp %x {graph.phase = "forward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %ra = trellis.all_reduce %a over @mesh ["dp"] sum {graph.phase = "forward"} : tensor<4xf32>
  %g0 = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %g1 = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 1>} : tensor<4xf32>
  // CHECK: graph.concat {{.*}} : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: trellis.all_reduce {{.*}} : tensor<8xf32>
  // CHECK: return
  %rg0 = trellis.all_reduce %g0 over @mesh ["dp"] sum : tensor<4xf32>
  %rg1 = trellis.all_reduce %g1 over @mesh ["dp"] sum : tensor<4xf32>
  return %ra, %rg0, %rg1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that in a step of one micro-batch (no graph.micro_batches), where
// phases are only marks, gradients reduced in bf16 bucket together: their
// casts back to f32 (graph.reduce_first) move down to their first use.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @bf16_gradients
func.func @bf16_gradients(%x: tensor<4xbf16>) -> (tensor<4xf32>, tensor<4xf32>) {
  %g0 = graph.exp %x {graph.phase = "weight", graph.part = #graph.part<layer 1>} : tensor<4xbf16>
  %r0 = trellis.all_reduce %g0 over @mesh ["dp"] sum {graph.phase = "weight"} : tensor<4xbf16>
  %c0 = graph.cast %r0 to "f32" {graph.phase = "weight", graph.reduce_first} : tensor<4xbf16>
  %g1 = graph.exp %x {graph.phase = "weight", graph.part = #graph.part<layer 0>} : tensor<4xbf16>
  %r1 = trellis.all_reduce %g1 over @mesh ["dp"] sum {graph.phase = "weight"} : tensor<4xbf16>
  %c1 = graph.cast %r1 to "f32" {graph.phase = "weight", graph.reduce_first} : tensor<4xbf16>
  // CHECK: graph.concat {{.*}} : tensor<4xbf16>, tensor<4xbf16>
  // CHECK-NEXT: trellis.all_reduce {{.*}} : tensor<8xbf16>
  // CHECK: graph.cast {{.*}} to "f32"
  // CHECK-NEXT: graph.neg
  // CHECK-NEXT: graph.cast {{.*}} to "f32"
  // CHECK-NEXT: return
  %n0 = graph.neg %c0 : tensor<4xf32>
  return %n0, %c1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that the reductions a step's loss (a scalar first result that is no
// update) depends on stay alone: a forward-only evaluation reduces the loss
// without any gradient. The gradients' reductions still share a bucket.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @loss_alone
func.func @loss_alone(%x: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>) {
  %l = graph.reduce_sum %x dims [0] : tensor<4xf32>
  %rl = trellis.all_reduce %l over @mesh ["dp"] sum : tensor<f32>
  %g0 = graph.exp %x : tensor<4xf32>
  %g1 = graph.neg %x : tensor<4xf32>
  // CHECK: trellis.all_reduce %{{.*}} over @mesh ["dp"] sum : tensor<f32>
  // CHECK-NOT: graph.concat {{.*}}tensor<1xf32>
  // CHECK: graph.concat {{.*}} : tensor<4xf32>, tensor<4xf32>
  // CHECK-NEXT: trellis.all_reduce {{.*}} : tensor<8xf32>
  // CHECK-NOT: trellis.all_reduce
  // CHECK: return
  %r0 = trellis.all_reduce %g0 over @mesh ["dp"] sum : tensor<4xf32>
  %r1 = trellis.all_reduce %g1 over @mesh ["dp"] sum : tensor<4xf32>
  return %rl, %r0, %r1 : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}
