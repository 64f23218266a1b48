// RUN: trellis-opt %s -split-input-file -trellis-schedule-collectives | FileCheck %s

// Tests that the backward's all-gather of a layer's input is issued before
// the data-gradient GEMM, which runs while it moves (64 x 64 f32 matmuls
// are compute-bound: 10.7 FLOPs per byte).
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @gather_before_data_gradient
// CHECK-NEXT: trellis.all_gather %arg2
// CHECK-NEXT: graph.matmul %arg0, %arg1
// CHECK-NEXT: graph.matmul %{{.*}} transposed, %arg0
func.func @gather_before_data_gradient(%dy: tensor<64x64xf32>, %w: tensor<64x64xf32>, %xs: tensor<32x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %dx = graph.matmul %dy, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %x = trellis.all_gather %xs over @mesh ["tp"] dim 0 {graph.phase = "weight"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %dw = graph.matmul %x transposed, %dy {graph.phase = "weight"} : tensor<64x64xf32>, tensor<64x64xf32>
  return %dx, %dw : tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// Tests that a collective passes one compute-bound op and no more (the
// gathered value is held one GEMM longer, not the whole backward), and
// any number of memory-bound ones on the way.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @one_gemm_early
// CHECK-NEXT: %[[A:.*]] = graph.matmul %arg0, %arg1
// CHECK-NEXT: %[[G:.*]] = trellis.all_gather %arg2
// CHECK-NEXT: graph.matmul %[[A]], %arg1
// CHECK-NEXT: graph.exp
// CHECK-NEXT: graph.matmul %[[G]]
func.func @one_gemm_early(%a: tensor<64x64xf32>, %w: tensor<64x64xf32>, %xs: tensor<32x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %b = graph.matmul %a, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %c = graph.matmul %b, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %e = graph.exp %c {graph.phase = "backward"} : tensor<64x64xf32>
  %x = trellis.all_gather %xs over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %d = graph.matmul %x, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  return %e, %d : tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// Tests that a reduce-scatter whose operand is made right before it and
// read right after it gets the weight-gradient GEMM made before it, which
// nothing reads before then: the GEMM runs while the data gradient is
// reduce-scattered.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @weight_gradient_after_scatter
// CHECK-NEXT: %[[DX:.*]] = graph.matmul %arg0, %arg1
// CHECK-NEXT: %[[SUM:.*]] = graph.add %[[DX]], %[[DX]]
// CHECK-NEXT: %[[S:.*]] = trellis.reduce_scatter %[[SUM]]
// CHECK-NEXT: graph.matmul %arg2 transposed, %arg0
// CHECK-NEXT: graph.exp %[[S]]
func.func @weight_gradient_after_scatter(%dy: tensor<64x64xf32>, %w: tensor<64x64xf32>, %x: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<32x64xf32>) {
  %dw = graph.matmul %x transposed, %dy {graph.phase = "weight"} : tensor<64x64xf32>, tensor<64x64xf32>
  %dx = graph.matmul %dy, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %sum = graph.add %dx, %dx {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %s = trellis.reduce_scatter %sum over @mesh ["tp"] dim 0 sum {graph.phase = "backward"} : tensor<64x64xf32> -> tensor<32x64xf32>
  %n = graph.exp %s {graph.phase = "backward"} : tensor<32x64xf32>
  return %dw, %n : tensor<64x64xf32>, tensor<32x64xf32>
}

// -----

// Tests that an op hiding one collective is not taken for the next: the
// search for a GEMM to move stops at the op that waits for the first.
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @keeps_the_first_window
// CHECK-NEXT: %[[S:.*]] = trellis.reduce_scatter %arg0
// CHECK-NEXT: graph.matmul %arg1 transposed, %arg1
// CHECK-NEXT: graph.exp %[[S]]
// CHECK-NEXT: %[[M:.*]] = graph.exp
// CHECK-NEXT: %[[G:.*]] = trellis.all_gather %[[M]]
// CHECK-NEXT: graph.matmul %[[G]], %arg1
func.func @keeps_the_first_window(%g: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %dw = graph.matmul %w transposed, %w {graph.phase = "weight"} : tensor<64x64xf32>, tensor<64x64xf32>
  %s = trellis.reduce_scatter %g over @mesh ["tp"] dim 0 sum {graph.phase = "backward"} : tensor<64x64xf32> -> tensor<32x64xf32>
  %n = graph.exp %s {graph.phase = "backward"} : tensor<32x64xf32>
  %m = graph.exp %n {graph.phase = "backward"} : tensor<32x64xf32>
  %x = trellis.all_gather %m over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %y = graph.matmul %x, %w {graph.phase = "backward"} : tensor<64x64xf32>, tensor<64x64xf32>
  return %dw, %y : tensor<64x64xf32>, tensor<64x64xf32>
}

// -----

// Tests what a collective does not pass: another collective (the
// communication stream runs in order), an op of another phase, and an op
// whose kernel communicates (the split cross-entropy: the runtime waits for
// every collective there).
trellis.mesh @mesh = <["tp"=2]>
// CHECK-LABEL: func.func @barriers
// CHECK-NEXT: trellis.all_gather %arg0
// CHECK-NEXT: trellis.all_gather %arg1
// CHECK-NEXT: graph.exp
// CHECK-NEXT: graph.matmul %arg2, %arg2
// CHECK-NEXT: trellis.all_gather %arg3
// CHECK-NEXT: graph.cross_entropy
// CHECK-NEXT: trellis.all_gather %arg4
func.func @barriers(%p: tensor<32x64xf32>, %q: tensor<32x64xf32>, %w: tensor<64x64xf32>, %r: tensor<32x64xf32>, %t: tensor<32x64xf32>, %logits: tensor<2x4x8xf32>, %labels: tensor<2x4xi32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>) {
  %a = trellis.all_gather %p over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %e = graph.exp %w {graph.phase = "backward"} : tensor<64x64xf32>
  %b = trellis.all_gather %q over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %f = graph.matmul %w, %w {graph.phase = "forward"} : tensor<64x64xf32>, tensor<64x64xf32>
  %c = trellis.all_gather %r over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  %loss = graph.cross_entropy %logits, %labels {axes = ["tp"], graph.phase = "backward"} : tensor<2x4x8xf32>, tensor<2x4xi32>
  %d = trellis.all_gather %t over @mesh ["tp"] dim 0 {graph.phase = "backward"} : tensor<32x64xf32> -> tensor<64x64xf32>
  return %a, %b, %e, %f, %c, %d, %loss : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>
}
