// RUN: trellis-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(trellis-bucket-all-reduces{per-part=1}))' | FileCheck %s

// Tests that a pipelined step is bucketed per part (ops marked with their
// micro-batch phase): a reduction inside a micro-batch stays alone, and
// gradients of different model parts (later cut into different stages) never
// share a bucket.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @pipelined
func.func @pipelined(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {graph.micro_batches = 2 : i64} {
  // CHECK: %[[M:.*]] = trellis.all_reduce {{.*}} {graph.phase = "forward"} : tensor<4xf32>
  %a = graph.exp %x {graph.phase = "forward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %ra = trellis.all_reduce %a over @mesh ["dp"] sum {graph.phase = "forward"} : tensor<4xf32>
  %g0 = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %h0 = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %g1 = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 1>} : tensor<4xf32>
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

// Tests that in a pipelined step a value of no model part (the loss, a tied
// weight's gradient) is never bucketed with anything.
trellis.mesh @mesh = <["dp"=2]>
// CHECK-LABEL: func.func @pipelined_without_part
// CHECK-NOT: graph.concat
// CHECK: return
func.func @pipelined_without_part(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {graph.micro_batches = 2 : i64} {
  %a = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %b = graph.exp %a : tensor<4xf32>
  %c = graph.exp %x {graph.phase = "backward", graph.part = #graph.part<layer 0>} : tensor<4xf32>
  %ra = trellis.all_reduce %b over @mesh ["dp"] sum : tensor<4xf32>
  %rc = trellis.all_reduce %c over @mesh ["dp"] sum : tensor<4xf32>
  return %ra, %rc : tensor<4xf32>, tensor<4xf32>
}
