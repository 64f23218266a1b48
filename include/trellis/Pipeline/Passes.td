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

#endif // TRELLIS_PIPELINE_PASSES_TD
