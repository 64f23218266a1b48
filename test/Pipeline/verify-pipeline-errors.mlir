// RUN: trellis-opt %s -split-input-file -trellis-verify-pipeline -verify-diagnostics

// Tests that stage functions must be scheduled before they are verified.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{expected the stage's schedule (trellis.schedule): run trellis-schedule-pipeline first}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step"} {
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = []} {
  return
}

// -----

// Tests that a receive needs a send on its channel.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  // expected-error @+1 {{'trellis.recv' op receives channel 5, which no stage sends}}
  %y = trellis.recv from @pipeline ["pp"] peer 1 channel 5 {trellis.program = "step"} : tensor<4xf32>
  %z = graph.neg %y {trellis.program = "step"} : tensor<4xf32>
  return %z : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = graph.neg %x {trellis.program = "step"} : tensor<4xf32>
  return
}

// -----

// Tests that two stages that each wait for the other before sending are a
// deadlock.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = trellis.recv from @pipeline ["pp"] peer 1 channel 1 {trellis.program = "step"} : tensor<4xf32>
  // expected-error @+1 {{'graph.neg' op deadlocks the pipeline: rank 0 waits in step for a value from rank 1 that is never sent before it}}
  %z = graph.neg %y {trellis.program = "step"} : tensor<4xf32>
  trellis.send %z to @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return %z : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {trellis.program = "step"} : tensor<4xf32>
  %z = graph.neg %y {trellis.program = "step"} : tensor<4xf32>
  trellis.send %z to @pipeline ["pp"] peer 0 channel 1 {trellis.program = "step"} : tensor<4xf32>
  return
}

// -----

// Tests that a schedule names only actions whose programs the stage has.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{schedule names action 'B0', which no program of the stage runs}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["F0", "B0", "step"]} {
  %y = graph.neg %x {graph.phase = "forward", trellis.program = "forward.c0"} : tensor<4xf32>
  %t = graph.microbatch_sum %y {trellis.program = "forward.c0"} : tensor<4xf32>
  return %t : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = []} {
  return
}

// -----

// Tests that a schedule runs every program of the micro-batch for each
// micro-batch.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{the schedule of pipeline rank 0 never runs forward.c0 for micro-batch 1}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 2 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["F0"]} {
  %y = graph.neg %x {graph.phase = "forward", trellis.program = "forward.c0"} : tensor<4xf32>
  %t = graph.microbatch_sum %y {trellis.program = "forward.c0"} : tensor<4xf32>
  return %t : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 2 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = []} {
  return
}

// -----

// Tests that a stage's program names its stage.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{a stage's program needs its stage (trellis.pipeline_stage)}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  return %x : tensor<4xf32>
}

// -----

// Tests that every stage has a program.
// expected-error @+1 {{expected a program for stage 0 of @train_step, found none}}
module {
  trellis.mesh @pipeline = <["pp"=2]>
  func.func @train_step.stage1(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
    return %x : tensor<4xf32>
  }
}

// -----

// Tests that each result of a stage names the step's result it is.
trellis.mesh @pipeline = <["pp"=2]>
// expected-error @+1 {{result 0 names no result of the step (trellis.result)}}
func.func @train_step.stage0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  return
}

// -----

// Tests that a channel carries one transfer: two sends on it are refused.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  trellis.send %x to @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  // expected-error @+1 {{'trellis.send' op sends channel 0, which another send uses}}
  trellis.send %x to @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return
}

// -----

// Tests that two receives on one channel are refused.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  trellis.send %x to @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {trellis.program = "step"} : tensor<4xf32>
  // expected-error @+1 {{'trellis.recv' op receives channel 0, which another receive uses}}
  %z = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return
}

// -----

// Tests that a send and its receive agree on who sends to whom.
trellis.mesh @pipeline = <["pp"=2]>
func.func @train_step.stage0(%x: tensor<4xf32>) -> (tensor<4xf32> {trellis.result = 0 : i64}) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 0 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  // expected-error @+1 {{'trellis.send' op sends channel 0 from stage 0 to stage 1, but stage 1 receives it from stage 1}}
  trellis.send %x to @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @train_step.stage1(%x: tensor<4xf32>) attributes {graph.micro_batches = 1 : i64, trellis.pipeline_stage = 1 : i64, trellis.stage_of = "train_step", trellis.schedule = ["step"]} {
  %y = trellis.recv from @pipeline ["pp"] peer 1 channel 0 {trellis.program = "step"} : tensor<4xf32>
  return
}
