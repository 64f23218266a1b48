// RUN: trellis-opt %s -trellis-reverse-mode | FileCheck %s --check-prefix=REVERSE
// RUN: trellis-opt %s -trellis-reverse-mode="loss-scale=0.25" -trellis-accumulate-micro-batches="micro-batches=4" | FileCheck %s --check-prefix=ACCUMULATE
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=sgd learning-rate=0.5" | FileCheck %s --check-prefix=SGD
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-recompute | FileCheck %s --check-prefix=RECOMPUTE
// RUN: not trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=LION

// Tests each autodiff pass alone. Reverse mode: @gradients holds the
// forward and the backward of one micro-batch, every op marked with its
// phase and part, the seed 1 (loss-scale), the gradient returned with its
// argument. The layer's backward only makes its weight's gradient (the
// data input's is dead): phase "weight".
// REVERSE-LABEL: func.func @gradients
// REVERSE-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
// REVERSE-NOT: graph.micro_batches
// REVERSE: %[[Y:.*]] = graph.matmul %{{.*}}, %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// REVERSE: %[[T:.*]] = graph.tanh %[[Y]] {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// REVERSE: graph.fill 1.000000e+00 shape [] {graph.part = #graph.part<head>, graph.phase = "backward"}
// REVERSE: graph.unary_grad tanh %[[Y]], %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// REVERSE: %[[DW:.*]] = graph.matmul %{{.*}} transposed, %{{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// REVERSE: return %{{.*}}, %[[DW]]

// Micro-batch accumulation: the step declares its micro-batches, sums the
// loss and the gradient over them where the step reads them, and averages
// the loss; the backward is seeded with 1/m by reverse mode.
// ACCUMULATE-LABEL: func.func @gradients
// ACCUMULATE-SAME: attributes {graph.micro_batches = 4 : i64}
// ACCUMULATE: graph.fill 2.500000e-01 shape [] {graph.part = #graph.part<head>, graph.phase = "backward"}
// ACCUMULATE-DAG: %[[LOSS:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<head>} : tensor<f32>
// ACCUMULATE-DAG: %[[DW:.*]] = graph.microbatch_sum %{{.*}} {graph.part = #graph.part<layer 0>} : tensor<4x3xf32>
// ACCUMULATE: %[[MEAN:.*]] = graph.scale %[[LOSS]] by 2.500000e-01
// ACCUMULATE: return %[[MEAN]], %[[DW]]

// Optimizer insertion: @gradients becomes @train_step with one update per
// parameter, outside the micro-batch.
// SGD-LABEL: func.func @train_step
// SGD-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64})
// SGD: %[[NEW:.*]] = graph.sgd %{{.*}}, %{{.*}} {learning_rate = 5.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
// SGD: return %{{.*}}, %[[NEW]]

// Recomputation: the layer's forward again right before its backward, read
// by the backward (and, like the backward it feeds, only there for the
// weight's gradient: phase "weight"); the head (last part) is not
// recomputed.
// RECOMPUTE-LABEL: func.func @gradients
// RECOMPUTE: %[[Y:.*]] = graph.matmul {{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
// RECOMPUTE: %[[Y2:.*]] = graph.matmul {{.*}} {graph.part = #graph.part<layer 0>, graph.phase = "weight"}
// RECOMPUTE-NOT: %[[Y]]
// RECOMPUTE: graph.unary_grad tanh %[[Y2]]
// RECOMPUTE: return

// LION: for the --optimizer option: Cannot find option named 'lion'!
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
