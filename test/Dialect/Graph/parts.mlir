// RUN: trellis-opt %s -split-input-file | trellis-opt -split-input-file | FileCheck %s
// RUN: trellis-opt %s -split-input-file --mlir-print-op-generic | trellis-opt -split-input-file | FileCheck %s

// Tests that the three kinds of model part print and parse back on ops.

// CHECK-LABEL: func.func @parts
func.func @parts(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: graph.neg %{{.*}} {graph.part = #graph.part<embedding>}
  %a = graph.neg %x {graph.part = #graph.part<embedding>} : tensor<4xf32>
  // CHECK: graph.neg %{{.*}} {graph.part = #graph.part<layer 0>}
  %b = graph.neg %a {graph.part = #graph.part<layer 0>} : tensor<4xf32>
  // CHECK: graph.neg %{{.*}} {graph.part = #graph.part<layer 17>}
  %c = graph.neg %b {graph.part = #graph.part<layer 17>} : tensor<4xf32>
  // CHECK: graph.neg %{{.*}} {graph.part = #graph.part<head>}
  %d = graph.neg %c {graph.part = #graph.part<head>} : tensor<4xf32>
  return %d : tensor<4xf32>
}

// -----

// Tests that the micro-batch count of a step and the phase marks of its
// ops print and parse back next to a part.

// CHECK-LABEL: func.func @action_marks
// CHECK-SAME: attributes {graph.micro_batches = 4 : i64}
func.func @action_marks(%x: tensor<4xf32>) -> tensor<4xf32> attributes {graph.micro_batches = 4 : i64} {
  // CHECK: graph.neg %{{.*}} {graph.part = #graph.part<layer 1>, graph.phase = "weight"}
  %a = graph.neg %x {graph.part = #graph.part<layer 1>, graph.phase = "weight"} : tensor<4xf32>
  // CHECK: graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 1>} : tensor<4xf32>
  %b = graph.microbatch_sum %a {graph.part = #graph.part<layer 1>} : tensor<4xf32>
  return %b : tensor<4xf32>
}
