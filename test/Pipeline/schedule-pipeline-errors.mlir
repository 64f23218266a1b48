// RUN: trellis-opt %s -split-input-file -trellis-schedule-pipeline -verify-diagnostics

// Tests that a schedule whose rule cannot run the pipeline's shape is
// rejected: interleaving needs the micro-batches to be a multiple of the
// ranks.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{pipeline schedule: the interleaved schedule needs micro-batches (3) to be a multiple of pipeline ranks (2)}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 3 : i64, trellis.pipeline_chunks = 2 : i64, trellis.pipeline_schedule = "interleaved", trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step"} {
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 3 : i64, trellis.pipeline_chunks = 2 : i64, trellis.pipeline_schedule = "interleaved", trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step"} {
  return
}

// -----

// Tests that the stage functions of the step must exist.
// expected-error @+1 {{expected the stage programs of @train_step (trellis-split-stages), found none}}
module {
  func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// Tests that an op of a stage function must name its action program.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step"} {
  // expected-error @+1 {{'graph.neg' op expected the action program it belongs to (trellis.program: step, or forward, backward or weight, with _receive, then .c<chunk>), found sideways.c0}}
  %y = graph.neg %x {trellis.program = "sideways.c0"} : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step"} {
  return
}
