// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-insert-optimizer

// Tests that the optimizer needs the gradients to update from.
// expected-error @+1 {{expected a function @gradients to add an optimizer to, found none}}
module {
  func.func @forward() {
    return
  }
}

// -----

// Tests that every result after the loss must be a parameter's gradient.
// expected-error @+1 {{expected result 1 to be a parameter's gradient (graph.gradient_of), found none}}
func.func @gradients(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> (tensor<f32>, tensor<2xf32>) {
  %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
  return %l, %w : tensor<f32>, tensor<2xf32>
}
