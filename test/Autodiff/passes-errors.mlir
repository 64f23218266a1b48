// RUN: trellis-opt %s -verify-diagnostics -trellis-accumulate-micro-batches="micro-batches=2"
// RUN: not trellis-opt %s -trellis-recompute 2>&1 | FileCheck %s --check-prefix=RECOMPUTE

// Tests that the passes after reverse mode need the gradients it makes.
// RECOMPUTE: error: expected a function @gradients to recompute the forward of, found none
// expected-error @+1 {{expected a function @gradients of one micro-batch, found none}}
module {
  func.func @forward(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<f32> {
    %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
    return %l : tensor<f32>
  }
}
