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

// -----

// Tests that the step it writes must not exist yet.
// expected-error @+1 {{function @train_step already exists}}
module {
  func.func @gradients(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> (tensor<f32>, tensor<4xf32> {graph.gradient_of = 0 : i64}) {
    %l = graph.reduce_sum %w dims [0] : tensor<4xf32>
    return %l, %w : tensor<f32>, tensor<4xf32>
  }
  func.func @train_step() {
    return
  }
}

// -----

// Tests that a parameter with a gradient has a name for its states.
// expected-error @+1 {{expected parameter argument 0 (result 1's graph.gradient_of) to have a name (graph.param), found none}}
func.func @gradients(%w: tensor<2xf32> {graph.role = "param"}) -> (tensor<f32>, tensor<2xf32> {graph.gradient_of = 0 : i64}) {
  %l = graph.reduce_sum %w dims [0] : tensor<2xf32>
  return %l, %w : tensor<f32>, tensor<2xf32>
}
