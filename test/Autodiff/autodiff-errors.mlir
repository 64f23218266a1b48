// RUN: trellis-opt %s -split-input-file -verify-diagnostics -trellis-autodiff

// Tests that the loss must be a scalar.
// expected-error @+1 {{expected a single tensor<f32> loss result, found 'tensor<2xf32>'}}
func.func @forward(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<2xf32> {
  return %w : tensor<2xf32>
}

// -----

// Tests that every argument needs a role.
// expected-error @+1 {{argument 0 needs graph.role "param", "input", "loss_scale" or "state", found none}}
func.func @forward(%w: tensor<2xf32>) -> tensor<f32> {
  %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
  return %l : tensor<f32>
}

// -----

// Tests that there must be something to differentiate.
// expected-error @+1 {{expected a function @forward to differentiate, found none}}
module {
  func.func @other() {
    return
  }
}

// -----

// Tests that gradient ops have no gradient of their own.
func.func @forward(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<f32> {
  // expected-error @+1 {{'graph.unary_grad' op has no gradient rule: it is a gradient or optimizer op, and higher-order differentiation is not supported}}
  %g = graph.unary_grad silu %w, %w : tensor<2xf32>
  %l = graph.reduce_sum %g dims [0] : tensor<2xf32>
  return %l : tensor<f32>
}


// -----

// Tests that reverse mode does not overwrite existing gradients.
// expected-error @+1 {{function @gradients already exists}}
module {
  func.func @forward(%w: tensor<2xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"}) -> tensor<f32> {
    %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
    return %l : tensor<f32>
  }
  func.func private @gradients()
}
