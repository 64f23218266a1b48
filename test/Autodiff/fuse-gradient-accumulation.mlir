// RUN: trellis-opt %s -split-input-file -trellis-fuse-gradient-accumulation | FileCheck %s
// RUN: trellis-opt %s -split-input-file -trellis-fuse-gradient-accumulation="into-totals=false" | FileCheck %s --check-prefix=APART

// Tests that a micro-batch's weight-gradient product that reaches the step
// only through its sum (and, under mixed precision, its cast to f32) is
// added straight into its f32 total, in the matmul's place and with its
// marks; without into-totals (ZeRO-2 and 3), and without micro-batches, a
// 16-bit product is written as its f32 gradient instead of cast; products
// read otherwise, casts reduced in 16 bits first, casts read inside the
// micro-batch and 16-bit totals are left alone.

// CHECK-LABEL: func.func @gradients
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x8x4xbf16>
// CHECK-SAME: %[[DY:[^:]*]]: tensor<2x8x3xbf16>
// CHECK-SAME: %[[A:[^:]*]]: tensor<16x4xf32>
// CHECK-SAME: %[[B:[^:]*]]: tensor<16x3xf32>
// CHECK: %[[XR:.*]] = graph.reshape %[[X]]
// CHECK: %[[DYR:.*]] = graph.reshape %[[DY]]
// CHECK-NEXT: %[[BF16:.*]] = graph.matmul_accumulate %[[XR]] transposed, %[[DYR]] {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
// CHECK-NEXT: %[[F32:.*]] = graph.matmul_accumulate %[[A]] transposed, %[[B]] {graph.part = #graph.part<layer 1>, graph.phase = "weight"} : tensor<16x4xf32>, tensor<16x3xf32>
// CHECK-NOT: graph.microbatch_sum %
// CHECK-NOT: graph.cast
// CHECK: return %[[BF16]], %[[F32]]
// APART-LABEL: func.func @gradients
// APART: %[[WIDE:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} into f32 {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
// APART: %[[H:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.part = #graph.part<layer 1>, graph.phase = "weight"} : tensor<16x4xf32>, tensor<16x3xf32>
// APART-NOT: graph.cast
// APART: graph.microbatch_sum %[[WIDE]]
// APART: graph.microbatch_sum %[[H]]
// APART-NOT: graph.matmul_accumulate
func.func @gradients(%x: tensor<2x8x4xbf16>, %dy: tensor<2x8x3xbf16>,
                     %a: tensor<16x4xf32>, %b: tensor<16x3xf32>)
    -> (tensor<4x3xf32>, tensor<4x3xf32>)
    attributes {graph.micro_batches = 2 : i64} {
  %xr = graph.reshape %x to [16, 4] {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<2x8x4xbf16>
  %dyr = graph.reshape %dy to [16, 3] {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<2x8x3xbf16>
  %g = graph.matmul %xr transposed, %dyr {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %g32 = graph.cast %g to "f32" {graph.part = #graph.part<layer 0>, graph.phase = "weight"} : tensor<4x3xbf16>
  %h = graph.matmul %a transposed, %b {graph.part = #graph.part<layer 1>, graph.phase = "weight"} : tensor<16x4xf32>, tensor<16x3xf32>
  %total = graph.microbatch_sum %g32 {graph.part = #graph.part<layer 0>} : tensor<4x3xf32>
  %total2 = graph.microbatch_sum %h {graph.part = #graph.part<layer 1>} : tensor<4x3xf32>
  return %total, %total2 : tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// CHECK-LABEL: func.func @gradients
// CHECK-NOT: graph.matmul_accumulate
// CHECK-NOT: into f32
// CHECK-COUNT-4: graph.microbatch_sum
// CHECK-NOT: graph.matmul_accumulate
// CHECK-NOT: into f32
func.func @gradients(%a: tensor<16x4xbf16>, %b: tensor<16x3xbf16>)
    -> (tensor<4x3xf32>, tensor<4x3xbf16>, tensor<4x3xf32>, tensor<4x3xf32>)
    attributes {graph.micro_batches = 2 : i64} {
  // Reduced over the data axes in bf16 before its cast.
  %g = graph.matmul %a transposed, %b {graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %g32 = graph.cast %g to "f32" {graph.phase = "weight", graph.reduce_first} : tensor<4x3xbf16>
  %t0 = graph.microbatch_sum %g32 : tensor<4x3xf32>
  // A 16-bit total.
  %h = graph.matmul %a transposed, %b {graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %t1 = graph.microbatch_sum %h : tensor<4x3xbf16>
  // A product the micro-batch reads too.
  %k = graph.matmul %a transposed, %b {graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %k32 = graph.cast %k to "f32" {graph.phase = "weight"} : tensor<4x3xbf16>
  %k2 = graph.tanh %k {graph.phase = "weight"} : tensor<4x3xbf16>
  %k232 = graph.cast %k2 to "f32" {graph.phase = "weight"} : tensor<4x3xbf16>
  %t2 = graph.microbatch_sum %k32 : tensor<4x3xf32>
  %t3 = graph.microbatch_sum %k232 : tensor<4x3xf32>
  return %t0, %t1, %t2, %t3 : tensor<4x3xf32>, tensor<4x3xbf16>, tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// Without micro-batches: the product is the gradient the step reads, in
// f32. A cast read inside the micro-batch is not a gradient's.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[G:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} into f32 {graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
// CHECK: %[[K:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.phase = "backward"} : tensor<16x4xbf16>, tensor<16x3xbf16>
// CHECK: %[[K32:.*]] = graph.cast %[[K]] to "f32"
// CHECK: graph.exp %[[K32]]
// CHECK: return %[[G]]
func.func @gradients(%a: tensor<16x4xbf16>, %b: tensor<16x3xbf16>)
    -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %g = graph.matmul %a transposed, %b {graph.phase = "weight"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %g32 = graph.cast %g to "f32" {graph.phase = "weight"} : tensor<4x3xbf16>
  %k = graph.matmul %a transposed, %b {graph.phase = "backward"} : tensor<16x4xbf16>, tensor<16x3xbf16>
  %k32 = graph.cast %k to "f32" {graph.phase = "backward"} : tensor<4x3xbf16>
  %e = graph.exp %k32 {graph.phase = "backward"} : tensor<4x3xf32>
  return %g32, %e : tensor<4x3xf32>, tensor<4x3xf32>
}
