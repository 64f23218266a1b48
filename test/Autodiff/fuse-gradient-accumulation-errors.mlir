// RUN: trellis-opt %s -verify-diagnostics -trellis-fuse-gradient-accumulation

// Tests that the fusion needs the gradients of a micro-batch.

// expected-error @+1 {{expected a function of gradients @gradients, found none}}
module {
  func.func @forward(%w: tensor<2xf32>) -> tensor<f32> {
    %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
    return %l : tensor<f32>
  }
}
