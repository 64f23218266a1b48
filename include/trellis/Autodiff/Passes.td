//===- Passes.td - Autodiff passes -------------------------*- tablegen -*-===//

#ifndef TRELLIS_AUTODIFF_PASSES_TD
#define TRELLIS_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def AutodiffPass : Pass<"trellis-autodiff", "::mlir::ModuleOp"> {
  let summary = "Turns a forward pass and loss into a training step";
  let description = [{
    Differentiates `func.func @forward` (arguments with `graph.role` "param"
    are parameters, "input" are data; the single result is a scalar loss) in
    reverse mode through each op's GradientOpInterface, and builds
    `func.func @train_step`: forward, loss, backward, and one optimizer step
    per parameter. Parameters, gradients and optimizer states are explicit
    values.

    Preconditions: @forward exists, returns one tensor<f32>, and every
    argument has a role. Postconditions: @train_step takes @forward's
    arguments, then the optimizer states (first and second moments for
    AdamW, role "adam_m"/"adam_v"), then the step counter (role "step",
    tensor<f32>, counted from 1); it returns the loss, then the updated
    parameters and states, each result marked `graph.updates = <argument>`.
    With `optimizer=none` it returns the loss and the gradient of every
    parameter (marked `graph.gradient_of = <argument>`), for gradient checks.

    With `micro-batches=m` > 1 (or `tag-actions`), @forward describes one
    micro-batch and the step is written once over it: its inputs hold one
    micro-batch, the function carries `graph.micro_batches = m`, every op
    of the micro-batch carries its `graph.phase` ("forward", "backward")
    and runs once per micro-batch, the backward is seeded with 1/m, and
    the loss and each model part's parameter gradients reach the ops of
    the step (gradient sums, optimizer: no phase, run once after every
    micro-batch) through `graph.microbatch_sum` (marked with the part). The
    loss is the mean of the micro-batch losses. This equals one step over
    the concatenated batch when the loss is a mean over equally sized
    micro-batches; the program does not grow with m.

    With `recompute=full`, the backward of each model part (a maximal run
    of ops of one `graph.part`, as the importer marks a layer)
    first recomputes the part's forward from its inputs and takes the
    gradients through the recomputed ops, so the part's inner activations
    die with the forward: only part boundaries stay alive until the
    backward. The last part (the loss) is not recomputed: its backward
    follows its forward at once. The results are the same ops on the same
    values.

    ```mlir
    // Before
    func.func @forward(%w: tensor<4x4xf32> {graph.role = "param", ...},
                       %x: ...) -> tensor<f32>
    // After (AdamW)
    func.func @train_step(%w, %x, %w_m, %w_v, %step)
        -> (tensor<f32>, tensor<4x4xf32> {graph.updates = 0 : i64}, ...)
    ```
  }];
  let options = [
    Option<"forwardName", "forward", "std::string", "\"forward\"",
           "Name of the function to differentiate">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "adamw, sgd, or none (return gradients)">,
    Option<"learningRate", "learning-rate", "double", "1e-3",
           "Learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW second-moment decay">,
    Option<"epsilon", "epsilon", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "Decoupled weight decay (AdamW) or L2 term (SGD)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step (gradient accumulation)">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "none, selective (the attention core: the same program as none, "
           "since the fused attention gradient recomputes its probabilities) "
           "or full (each model part's forward, e.g. a layer, again before "
           "its backward)">,
    Option<"tagActions", "tag-actions", "bool", "false",
           "Write the step as micro-batches even for one (phases, "
           "graph.microbatch_sum) and mark the backward ops that only make "
           "parameter gradients with phase weight, for the pipeline split">
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // TRELLIS_AUTODIFF_PASSES_TD
