// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="weight-decay=0.1" | FileCheck %s --check-prefix=DEFAULT
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="weight-decay=0.1 decay-1d=true" | FileCheck %s --check-prefix=ALL
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=sgd weight-decay=0.1" | FileCheck %s --check-prefix=SGD
// RUN: trellis-opt %s -trellis-autodiff="weight-decay=0.1 decay-1d=true" | FileCheck %s --check-prefix=ALL

// Tests that weight decay follows each parameter's role, not its name: the
// matrix is decayed, the 1-D bias and the norm gain are not (Megatron's and
// Hugging Face Trainer's parameter groups), unless decay-1d asks for it.
// DEFAULT-LABEL: func.func @train_step
// DEFAULT: graph.adamw %arg0, {{.*}}weight_decay = 1.000000e-01
// DEFAULT: graph.adamw %arg1, {{.*}}weight_decay = 0.000000e+00
// DEFAULT: graph.adamw %arg2, {{.*}}weight_decay = 0.000000e+00

// ALL-LABEL: func.func @train_step
// ALL: graph.adamw %arg0, {{.*}}weight_decay = 1.000000e-01
// ALL: graph.adamw %arg1, {{.*}}weight_decay = 1.000000e-01
// ALL: graph.adamw %arg2, {{.*}}weight_decay = 1.000000e-01

// SGD's L2 term follows the same groups.
// SGD-LABEL: func.func @train_step
// SGD: graph.sgd %arg0, {{.*}}weight_decay = 1.000000e-01
// SGD: graph.sgd %arg1, {{.*}}weight_decay = 0.000000e+00
// SGD: graph.sgd %arg2, {{.*}}weight_decay = 0.000000e+00

func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "normal:0.02"},
                   %b: tensor<3xf32> {graph.role = "param", graph.param = "b", graph.init = "zeros"},
                   %g: tensor<3xf32> {graph.role = "param", graph.param = "g", graph.init = "ones"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %z = graph.add %y, %b {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>, tensor<3xf32>
  %n = graph.rms_norm %z, %g eps 1.0e-5 {graph.part = #graph.part<head>} : tensor<2x3xf32>, tensor<3xf32>
  %loss = graph.reduce_sum %n dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
