//===- Passes.td - Pipeline passes -------------------------*- tablegen -*-===//

#ifndef TRELLIS_PIPELINE_PASSES_TD
#define TRELLIS_PIPELINE_PASSES_TD

include "mlir/Pass/PassBase.td"

def AssignStagesPass : Pass<"trellis-assign-stages", "::mlir::ModuleOp"> {
  let summary = "Assigns every op of a step's micro-batch to a pipeline stage";
  let description = [{
    Splits the layers of a step of micro-batches over `stages` pipeline
    ranks of `chunks` model chunks each (virtual stage `c * stages + s` on
    rank `s`) and marks every op of the micro-batch (graph.phase) with its
    virtual stage, `trellis.stage`: the embedding on the first, the head
    and loss on the last, each layer where the split puts it; an op of no
    model part goes with its users, else its operands. The split is
    `layers` when given (one count per virtual stage, each at least 1,
    summing to the model's layers), else the balanced one: the cost model
    (`computePipelineCost` over `@forward`, or the step's forward ops)
    by roofline time then memory, refined by simulating `schedule`.

    Preconditions: the function carries `graph.micro_batches`; its ops, or
    `@forward`'s, declare their model parts (graph.part) in model order,
    layers numbered without gaps. Postconditions: every op of the
    micro-batch has `trellis.stage`; the function carries the pipeline it
    was cut for: `trellis.pipeline_stages`, `trellis.pipeline_chunks`,
    `trellis.stage_layers` and `trellis.pipeline_schedule`.

    Fails with a diagnostic for more virtual stages than layers, a stage
    without a layer, a split that does not sum, parts out of order, and a
    schedule that cannot run the shape (the interleaved schedule needs the
    micro-batches to be a multiple of the ranks).

    ```mlir
    // Before (stages=2)
    %h = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>, graph.phase = "forward"} ...
    // After
    %h = graph.matmul %x, %w0 {graph.part = #graph.part<layer 0>, graph.phase = "forward", trellis.stage = 0 : i64} ...
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The step to cut into stages">,
    Option<"stages", "stages", "int64_t", "2", "Pipeline ranks">,
    Option<"chunks", "chunks", "int64_t", "1",
           "Model chunks per rank (interleaved schedules)">,
    Option<"schedule", "schedule", "::trellis::ScheduleKind",
           "::trellis::ScheduleKind::OneFOneB",
           "The schedule the split is balanced for", [{::llvm::cl::values(
             clEnumValN(::trellis::ScheduleKind::GPipe, "gpipe",
                        "GPipe: every forward, then every backward"),
             clEnumValN(::trellis::ScheduleKind::OneFOneB, "1f1b",
                        "1F1B: one forward, one backward"),
             clEnumValN(::trellis::ScheduleKind::Interleaved, "interleaved",
                        "interleaved 1F1B over several chunks per rank"),
             clEnumValN(::trellis::ScheduleKind::ZeroBubble, "zb-h1",
                        "zero-bubble ZB-H1: weight gradients run late"))}]>,
    ListOption<"layers", "layers", "int64_t",
               "Layers per virtual stage (else the balanced split)">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def SplitStagesPass : Pass<"trellis-split-stages", "::mlir::ModuleOp"> {
  let summary = "Cuts a step of micro-batches into one program per pipeline stage";
  let description = [{
    Replaces `function` (a step of micro-batches, cut by
    trellis-assign-stages when it has several stages) by one function per
    pipeline stage, `@<function>.stage<s>`: what that stage's ranks run. Its
    body is its action programs one after the other, each op marked with
    the program it belongs to (`trellis.program`: `forward.c0`,
    `backward_receive.c0`, ..., `step`): the ops of one micro-batch, written
    once, then the ops of the step (those several stages need are copied
    into each). A value made on another stage arrives by `trellis.recv` in
    the receive program of the action that reads it first, and leaves the
    stage that made it by `trellis.send` at the end of the action that made
    it (a value of the step: inside the step programs); each send and
    receive names its peer stage along `axis` and a channel unique in the
    step. A value every rank of
    `piece-axis` holds whole crosses in pieces (trellis.slice_shard before
    the send, trellis.all_gather after the receives).

    The functions have no schedule yet: trellis-schedule-pipeline orders
    their programs, trellis-verify-pipeline proves them runnable together.

    Each stage function takes the step's arguments (`trellis.held` on those
    it holds) and returns the step's results it holds (`trellis.result`:
    the index in the step). The transfers name `@pipeline`, a mesh of the
    pipeline axis (major) and the step's mesh axes.

    ```mlir
    // After (2 stages): stage 1
    func.func @train_step.stage1(...) attributes {trellis.pipeline_stage = 1 : i64, ...} {
      %x = trellis.recv from @pipeline ["pp"] peer 0 channel 0 {trellis.program = "forward_receive.c0"} : tensor<2x16x64xf32>
      %h = graph.matmul %x, %w {trellis.program = "forward.c0", ...}
      ...
    }
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The step to split">,
    Option<"axis", "axis", "std::string", "\"pp\"",
           "The mesh axis of pipeline stages">,
    ListOption<"meshOrder", "mesh-order", "std::string",
               "The axes of the plan's mesh, major to minor (default: the "
               "pipeline axis, then the step's mesh)">,
    Option<"pieceAxis", "piece-axis", "std::string", "\"\"",
           "Send values every rank of this axis holds whole in pieces">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def SchedulePipelinePass
    : Pass<"trellis-schedule-pipeline", "::mlir::ModuleOp"> {
  let summary = "Orders each pipeline stage's action programs per micro-batch";
  let description = [{
    Applies the ordering rule of the step's pipeline
    (`trellis.pipeline_schedule`: gpipe, 1f1b, interleaved, zb-h1; a new
    schedule is a new rule in PipelineSchedule.cpp) to the stage functions
    trellis-split-stages made of `function`: writes `trellis.schedule` on
    each (`F0 F1 RB0 B0 ... step`: every program of the micro-batch once per
    micro-batch, receive programs at the rule's receive slots or just before
    their action, the step program last). Where each send completes (and
    its buffer is freed) the runtime proves from these schedules
    (planSendCompletions). Fails with a diagnostic
    when the rule cannot run the pipeline's shape (the interleaved schedule
    needs the micro-batches to be a multiple of the ranks) or runs a
    program other than once per micro-batch.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The step whose stage functions to schedule">
  ];
}

def VerifyPipelinePass : Pass<"trellis-verify-pipeline", "::mlir::ModuleOp"> {
  let summary = "Proves the stage functions of a pipeline runnable together";
  let description = [{
    Checks the stage functions of `function` (split and scheduled), at the
    level of programs and schedules (linear in their size, not in the
    micro-batches times the programs): every transfer is sent and received
    once, by the stages it names, in programs of its kind (a micro-batch's
    or the step's); every program reads values made before it on its stage
    in the same micro-batch, received there, or held there (arguments,
    totals of the step); all schedules, run together (each stage in order,
    sends never blocking, an action waiting for the transfers it reads),
    reach their ends; every result ends on the stages that hold it. A
    failure names the op, the stages and the action.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The step whose stage functions to verify">
  ];
}

#endif // TRELLIS_PIPELINE_PASSES_TD
