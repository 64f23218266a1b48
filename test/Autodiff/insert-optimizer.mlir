// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=sgd learning-rate=0.5" | FileCheck %s --check-prefix=SGD
// RUN: not trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=LION
// RUN: trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="lr-schedule=cosine warmup-steps=2 decay-steps=10 min-lr=1e-4" | FileCheck %s --check-prefix=SCHEDULE
// RUN: not trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="optimizer=sgd lr-schedule=cosine decay-steps=10" 2>&1 | FileCheck %s --check-prefix=SCHEDULE-SGD
// RUN: not trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="lr-schedule=step" 2>&1 | FileCheck %s --check-prefix=SCHEDULE-KIND
// RUN: not trellis-opt %s -trellis-reverse-mode -trellis-insert-optimizer="lr-schedule=linear decay-steps=0" 2>&1 | FileCheck %s --check-prefix=SCHEDULE-DECAY

// Tests that optimizer insertion makes @gradients @train_step with one update
// per parameter, outside the micro-batch.
// SGD-LABEL: func.func @train_step
// SGD-SAME: -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64})
// SGD: %[[NEW:.*]] = graph.sgd %{{.*}}, %{{.*}} {learning_rate = 5.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
// SGD: return %{{.*}}, %[[NEW]]

// Tests that a learning-rate schedule is written on each AdamW update: its
// rate at each step comes from the step count.
// SCHEDULE: graph.adamw {{.*}}decay_steps = 10 : i64, {{.*}}lr_schedule = "cosine", min_lr = 1.000000e-04 : f64, warmup_steps = 2 : i64, {{.*}}wsd_decay_steps = 0 : i64
// SCHEDULE-SGD: error: --lr-schedule: a schedule reads AdamW's step count: expected --optimizer adamw, found sgd
// SCHEDULE-KIND: error: --lr-schedule: expected constant, linear, cosine or wsd, found 'step'
// SCHEDULE-DECAY: error: --decay-steps: expected the step the decay ends at, after the 0 warmup steps, found 0

// Tests that an unknown optimizer is refused by the option parser.
// LION: for the --optimizer option: Cannot find option named 'lion'!
func.func @forward(%w: tensor<4x3xf32> {graph.role = "param", graph.param = "w", graph.init = "zeros"},
                   %x: tensor<2x4xf32> {graph.role = "input", graph.param = "x"}) -> tensor<f32> {
  %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>} : tensor<2x4xf32>, tensor<4x3xf32>
  %t = graph.tanh %y {graph.part = #graph.part<layer 0>} : tensor<2x3xf32>
  %loss = graph.reduce_sum %t dims [0, 1] {graph.part = #graph.part<head>} : tensor<2x3xf32>
  return %loss : tensor<f32>
}
