// RUN: trellis-opt %s -split-input-file -trellis-reverse-mode -verify-diagnostics
// RUN: not trellis-opt %s -split-input-file -trellis-mixed-precision="forward=absent" 2>&1 | FileCheck %s --check-prefix=MIXED

// Tests that reverse mode refuses what it cannot differentiate, and the errors
// of the passes around it: a declaration has no body.
// MIXED: error: expected a function @absent to compute in mixed precision, found none

// expected-error @+1 {{expected a body to differentiate}}
func.func private @forward(tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32>

// -----

// Tests that a parameter is an f32 tensor.
// expected-error @+1 {{parameter argument 0 must be an f32 tensor, found 'tensor<4xbf16>'}}
func.func @forward(%w: tensor<4xbf16> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32> {
  %c = graph.cast %w to "f32" : tensor<4xbf16>
  %l = graph.reduce_sum %c dims [0] : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// Tests that a state (read by the step, never trained) is an f32 tensor.
// expected-error @+1 {{state argument 0 must be an f32 tensor, found 'tensor<4xbf16>'}}
func.func @forward(%s: tensor<4xbf16> {graph.role = "state", graph.param = "s", graph.init = "zeros"}) -> tensor<f32> {
  %c = graph.cast %s to "f32" : tensor<4xbf16>
  %l = graph.reduce_sum %c dims [0] : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// Tests that an op without a gradient rule is named.
trellis.mesh @mesh = <["dp"=2]>
func.func @forward(%w: tensor<4xf32> {graph.role = "param", graph.param = "w", graph.init = "ones"}) -> tensor<f32> {
  // expected-error @+1 {{'trellis.all_reduce' op has no gradient rule (GradientOpInterface)}}
  %r = trellis.all_reduce %w over @mesh ["dp"] sum : tensor<4xf32>
  %l = graph.reduce_sum %r dims [0] : tensor<4xf32>
  return %l : tensor<f32>
}
