//===- Passes.td - Autodiff passes -------------------------*- tablegen -*-===//
//
// A forward pass and loss becomes a training step in six passes, each
// runnable alone: mixed precision (casts into the compute dtype), reverse
// mode (the gradients of one micro-batch), recomputation, micro-batch
// accumulation, optimizer insertion, and master weights (16-bit
// parameters updated through fp32 masters).
// `buildTrainingPipeline` (Passes.h) strings them together; trellis-opt
// registers it as `trellis-autodiff`.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_AUTODIFF_PASSES_TD
#define TRELLIS_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def MixedPrecisionPass : Pass<"trellis-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "Computes the forward in bf16 or f16 from fp32 parameters";
  let description = [{
    Inserts `graph.cast` ops into `func.func @forward` following each op's
    PrecisionOpInterface policy, so that reverse mode then differentiates
    the casts too:
    - `Low` ops (matmul, attention, norms, elementwise, ...) compute in the
      `compute` dtype: a parameter operand is cast down (one cast per
      parameter and model part, before its first use there; one per
      parameter with `cast-params-once`, as autocast caches a weight's
      cast, so a tied table has one compute copy), and an f32
      operand that meets a low-precision one is cast down before the op.
      Ops whose float operands are all f32 values that are not parameters
      (the loss after cross-entropy) stay in fp32.
    - `Float32` ops (cross-entropy) take low-precision operands as they
      are and compute in fp32 inside: no cast, so no fp32 copy of the
      logits lives until the backward; the loss is f32.
    - `Operands` ops (casts) are left alone.
    - A `Low` op marked `graph.precision = "f32"` (DeepSeek-V3's router)
      computes in fp32: its low-precision operands are cast up, its
      parameters read uncast (they stay fp32 parameters, their own
      masters).
    The parameters stay f32 here: the gradient of a cast is a cast back, so
    every parameter gradient, the accumulation over micro-batches and the
    optimizer are in fp32; `-trellis-master-weights` later turns the f32
    parameters into fp32 master weights of 16-bit parameters. Kernels accumulate sums
    and statistics in fp32 whatever their operands' dtype.

    ```mlir
    // Before
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32>
    // After (compute=bf16; %x is already bf16)
    %w16 = graph.cast %w to "bf16" : tensor<4x3xf32>
    %y = graph.matmul %x, %w16 : tensor<2x4xbf16>, tensor<4x3xbf16>
    ```
  }];
  let options = [
    Option<"forwardName", "forward", "std::string", "\"forward\"",
           "Name of the forward function">,
    Option<"dynamicLossScale", "dynamic-loss-scale", "bool", "false",
           "Multiply the loss by a scale the runtime sets each step (an "
           "argument of role loss_scale), so that small f16 gradients do not "
           "flush to zero; -trellis-insert-optimizer divides the gradients "
           "and the reported loss by it again">,
    Option<"reduceGradientsInCompute", "reduce-gradients-in-compute", "bool",
           "false",
           "Mark the parameter casts graph.reduce_first: data-parallel "
           "gradients are then reduced in the compute dtype, before their "
           "cast to f32 (else in f32, after it)">,
    Option<"castParamsOnce", "cast-params-once", "bool", "false",
           "Cast each parameter once, before its first use, instead of once "
           "per model part (for steps no pipeline splits: a shared "
           "parameter then has one compute copy and one gradient)">,
    Option<"compute", "compute", "::trellis::LowPrecision",
           "::trellis::LowPrecision::BF16", "The compute dtype",
           [{::llvm::cl::values(
             clEnumValN(::trellis::LowPrecision::BF16, "bf16", "bfloat16"),
             clEnumValN(::trellis::LowPrecision::F16, "f16",
                        "IEEE half precision"))}]>
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect",
                           "::mlir::func::FuncDialect"];
}

def ReverseModePass : Pass<"trellis-reverse-mode", "::mlir::ModuleOp"> {
  let summary = "Differentiates a forward pass and loss into its gradients";
  let description = [{
    Differentiates `func.func @forward` (arguments with `graph.role` "param"
    are parameters, "input" are data; the single result is a scalar loss) in
    reverse mode through each op's GradientOpInterface, and builds
    `func.func @gradients`: the forward, the backward seeded with
    `loss-scale`, and the gradient of every parameter.

    Every op of the forward and the backward carries its `graph.phase`
    ("forward", "backward", or "weight": the backward ops that only make
    their part's parameter gradients, which a zero-bubble schedule runs
    late) and every backward op the `graph.part` of the forward op it
    differentiates. A parameter's gradient is summed per model part first
    (phase-marked ops); the parts' sums are added by ops of the step (no
    phase), so a parameter two parts share (a tied embedding) has one sum
    per part, which a pipeline keeps on each part's stage. With
    `sum-parts-in-micro-batch` (steps no pipeline splits) they are added
    inside the micro-batch instead, in the part that contributes last: one
    gradient to accumulate, reduce and hold. Parameters the loss does not
    depend on get a zero gradient.

    Preconditions: @forward exists, returns one tensor<f32>, every argument
    has a role, parameters are f32. Postconditions: @gradients takes
    @forward's arguments and returns the loss, then the gradient of every
    parameter (marked `graph.gradient_of = <argument>`).

    ```mlir
    // Before
    func.func @forward(%w: tensor<4x4xf32> {graph.role = "param", ...},
                       %x: ...) -> tensor<f32>
    // After
    func.func @gradients(%w, %x)
        -> (tensor<f32>, tensor<4x4xf32> {graph.gradient_of = 0 : i64})
    ```
  }];
  let options = [
    Option<"forwardName", "forward", "std::string", "\"forward\"",
           "Name of the function to differentiate">,
    Option<"lossScale", "loss-scale", "double", "1.0",
           "The seed of the backward (1/m for m micro-batches)">,
    Option<"sumPartsInMicroBatch", "sum-parts-in-micro-batch", "bool",
           "false",
           "Add a shared parameter's part sums inside the micro-batch (one "
           "gradient to accumulate; for steps no pipeline splits)">
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect",
                           "::mlir::func::FuncDialect"];
}

def RecomputePass : Pass<"trellis-recompute", "::mlir::ModuleOp"> {
  let summary = "Recomputes each model part's forward before its backward";
  let description = [{
    Full activation recomputation on the gradients of `function` (as
    trellis-reverse-mode makes them): for every model part but the last
    (whose backward follows its forward at once), the part's forward ops
    (phase "forward", a maximal run of one graph.part) are computed again
    right before the part's first backward op, from the values the part
    reads, and every backward op from there on reads the copies. The
    part's inner activations then die with the forward: only part
    boundaries stay alive until the backward. The copies run in the
    backward (phase "backward"); copies nothing reads are removed. The
    results are the same ops on the same values.

    Selective recomputation (the attention core) needs no pass: the fused
    attention gradient always recomputes its probabilities from query and
    key.

    ```mlir
    // Before: the layer's matmul result %y lives until tanh's gradient
    %y = graph.matmul %x, %w {graph.part = #graph.part<layer 0>, graph.phase = "forward"}
    ...
    %dy = graph.unary_grad tanh %y, %g {graph.phase = "backward", ...}
    // After
    %y2 = graph.matmul %x, %w {graph.part = #graph.part<layer 0>, graph.phase = "backward"}
    %dy = graph.unary_grad tanh %y2, %g {graph.phase = "backward", ...}
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"gradients\"",
           "The gradients to recompute the forward of">
  ];
}

def RematerializeParameterViewsPass
    : Pass<"trellis-rematerialize-parameter-views", "::mlir::ModuleOp"> {
  let summary = "Makes the backward's views of weights again from the weights";
  let description = [{
    A view of a parameter in the forward of `function` (a cast, slice,
    reshape or transpose of a parameter or of such a view: GPT-2's q, k
    and v slices of the fused c_attn weight, a part's compute copy of a
    weight) that the backward reads would otherwise live from the forward
    to the backward, once per micro-batch in flight. Each backward reader
    reads a copy instead, made from the parameter right before the first
    reader of its model part and phase (one copy per backward action,
    marked with that part and phase): the forward's view dies with the
    forward. The copies compute the same
    values; they cost one more pass over the view per micro-batch.

    ```mlir
    // Before: %wq lives until the backward's matmul
    %s = graph.slice %w offsets [0, 0, 0] sizes [64, 1, 64] {graph.phase = "forward", ...}
    %wq = graph.reshape %s to [64, 64] {graph.phase = "forward", ...}
    ...
    %dx = graph.matmul %dq, %wq transposed {graph.phase = "backward", ...}
    // After
    %s2 = graph.slice %w offsets [0, 0, 0] sizes [64, 1, 64] {graph.phase = "backward", ...}
    %wq2 = graph.reshape %s2 to [64, 64] {graph.phase = "backward", ...}
    %dx = graph.matmul %dq, %wq2 transposed {graph.phase = "backward", ...}
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"gradients\"",
           "The gradients of a micro-batch">
  ];
}

def AccumulateMicroBatchesPass
    : Pass<"trellis-accumulate-micro-batches", "::mlir::ModuleOp"> {
  let summary = "Makes the gradients of one micro-batch a step of m";
  let description = [{
    Declares that `function` (gradients of one micro-batch, as
    trellis-reverse-mode makes them) runs its phase-marked ops once per
    micro-batch, `micro-batches` times per step (`graph.micro_batches`),
    and inserts `graph.microbatch_sum` wherever a value of the micro-batch
    reaches the step: an op without a phase or a result. Each sum is
    marked with the part of the op that made its operand. The loss (result
    0) becomes the mean of the micro-batch losses. With the backward
    seeded with 1/m (reverse mode's `loss-scale`), the step equals one
    over the concatenated batch when the loss is a mean over equally sized
    micro-batches; the program does not grow with m.

    ```mlir
    // Before
    %g = graph.matmul %x transposed, %dy {graph.phase = "weight", ...}
    %new = graph.sgd %w, %g ...
    // After
    %total = graph.microbatch_sum %g {graph.part = ...}
    %new = graph.sgd %w, %total ...
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"gradients\"",
           "The gradients of one micro-batch">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step">
  ];
}

def FuseGradientAccumulationPass
    : Pass<"trellis-fuse-gradient-accumulation", "::mlir::ModuleOp"> {
  let summary = "Writes weight-gradient products as f32, into their totals";
  let description = [{
    Megatron's gradient-accumulation fusion, on `function` (the gradients
    of a micro-batch, after -trellis-accumulate-micro-batches when there
    are several):

    - a 16-bit `graph.matmul` of the micro-batch whose product leaves it
      only through one cast to f32 (to its sum over micro-batches, the
      step's ops or the results) is written in f32 (`f32_result`): the
      fp32 sums are never rounded to 16 bits;
    - with `into-totals`, an f32 product whose only reader is its
      `graph.microbatch_sum` becomes one `graph.matmul_accumulate` in the
      matmul's place: each micro-batch's product is added into the total
      as it is made, never stored on its own.

    Under mixed precision the gradients lose each product's rounding to 16
    bits; in fp32 only the order of the additions may change. Casts
    reduced in 16 bits first (`graph.reduce_first`, `--grad-reduce-dtype
    bf16`) and 16-bit totals are left alone. ZeRO-2 and 3 reduce-scatter
    each micro-batch's product before its sum: they run without
    `into-totals`.

    ```mlir
    // Before
    %g = graph.matmul %x transposed, %dy {graph.phase = "weight", ...}
        : tensor<32x64xbf16>, tensor<32x256xbf16>
    %g32 = graph.cast %g to "f32" {graph.phase = "weight", ...}
    %total = graph.microbatch_sum %g32 : tensor<64x256xf32>
    // After
    %total = graph.matmul_accumulate %x transposed, %dy
        {graph.phase = "weight", ...} : tensor<32x64xbf16>, tensor<32x256xbf16>
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"gradients\"",
           "The gradients of a micro-batch">,
    Option<"intoTotals", "into-totals", "bool", "true",
           "Add products summed over micro-batches into their totals "
           "(graph.matmul_accumulate)">
  ];
}

def InsertOptimizerPass
    : Pass<"trellis-insert-optimizer", "::mlir::ModuleOp"> {
  let summary = "Turns the gradients into a training step with an optimizer";
  let description = [{
    Rewrites `func.func @gradients` (the loss, then each parameter's
    gradient marked `graph.gradient_of`) into `func.func @train_step`: one
    update per parameter, explicit optimizer states, each result marked
    `graph.updates = <argument>`. AdamW adds the first and second moments
    of every parameter as arguments (roles "adam_m", "adam_v", init
    zeros) and the step counter (role "step", tensor<f32>, counted from 1);
    the step returns the loss, the new parameters, the new first moments,
    then the new second moments. SGD updates the parameters alone. The
    update ops belong to the step (no phase).

    ```mlir
    // Before
    func.func @gradients(%w, %x) -> (tensor<f32>, tensor<4x3xf32> {graph.gradient_of = 0 : i64})
    // After (AdamW)
    func.func @train_step(%w, %x, %w_m, %w_v, %step)
        -> (tensor<f32>, tensor<4x3xf32> {graph.updates = 0 : i64}, ...)
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "::trellis::OptimizerKind",
           "::trellis::OptimizerKind::AdamW", "The update rule",
           [{::llvm::cl::values(
             clEnumValN(::trellis::OptimizerKind::AdamW, "adamw",
                        "AdamW with decoupled weight decay"),
             clEnumValN(::trellis::OptimizerKind::Sgd, "sgd",
                        "SGD with an L2 term"))}]>,
    Option<"learningRate", "learning-rate", "double", "1e-3",
           "Learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW second-moment decay">,
    Option<"epsilon", "epsilon", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "Decoupled weight decay (AdamW) or L2 term (SGD)">,
    Option<"decayOneDimensional", "decay-1d", "bool", "false",
           "Decay 1-D parameters (biases, norm gains) too; by default they "
           "get no weight decay, as in Megatron and Hugging Face's Trainer">,
    Option<"lrSchedule", "lr-schedule", "std::string", "\"\"",
           "A learning-rate schedule for AdamW (constant, linear, cosine, "
           "wsd; trellis/Common/LearningRate.h), peaking at learning-rate; "
           "empty: the rate is constant">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0",
           "Schedule: steps of linear warmup">,
    Option<"decaySteps", "decay-steps", "int64_t", "0",
           "Schedule: the step the decay ends at">,
    Option<"wsdDecaySteps", "wsd-decay-steps", "int64_t", "0",
           "Schedule wsd: the steps of the final decay">,
    Option<"minLearningRate", "min-lr", "double", "0.0",
           "Schedule: the rate after the decay">
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

def MasterWeightsPass : Pass<"trellis-master-weights", "::mlir::ModuleOp"> {
  let summary = "Keeps 16-bit parameters and their fp32 master weights";
  let description = [{
    After `-trellis-mixed-precision` and `-trellis-insert-optimizer`: a
    parameter of `func.func @train_step` that the micro-batch reads only
    through casts to one 16-bit dtype, and that one optimizer op updates,
    becomes an argument of that dtype (role "param": the compute copy the
    forward and backward read directly), and a new f32 argument of role
    "master" (same `graph.param` name, `graph.init` and layout) takes its
    place in the update. The step returns the new master (marked
    `graph.updates` of the master) and its cast to the compute dtype as the
    parameter's update. The cast to the compute dtype so happens once per
    step, after the update, however many micro-batches the step has; the
    gradients are unchanged (the cast's gradient, a cast back to f32, was
    made by reverse mode). Other parameters are left alone.

    This is the layout ZeRO shards: the master and the moments are
    optimizer state; the parameter is what every use gathers.

    ```mlir
    // Before
    func.func @train_step(%w: tensor<4x3xf32> {graph.role = "param"}, ...) {
      %w16 = graph.cast %w to "bf16" {graph.phase = "forward"} : tensor<4x3xf32>
      ...
      %new, %m1, %v1 = graph.adamw %w, %g, %m, %v, %step ...
      return %loss, %new, ...
    }
    // After
    func.func @train_step(%w: tensor<4x3xbf16> {graph.role = "param"}, ...,
                          %w_master: tensor<4x3xf32> {graph.role = "master"}) {
      ... uses %w directly ...
      %new, %m1, %v1 = graph.adamw %w_master, %g, %m, %v, %step ...
      %new16 = graph.cast %new to "bf16" : tensor<4x3xf32>
      return %loss, %new16, ..., %new
    }
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

def ClipGradientsPass : Pass<"trellis-clip-gradients", "::mlir::ModuleOp"> {
  let summary = "Scales every update's gradient down to a global norm of at most max-norm";
  let description = [{
    After `-trellis-insert-optimizer` (and `-trellis-master-weights`): the
    gradients every optimizer update of the training step reads (unscaled
    by the loss scale, summed over micro-batches and tied uses) are
    clipped together by their global L2 norm, as
    `torch.nn.utils.clip_grad_norm_` does: with n the norm over all of
    them, each is multiplied by min(1, max-norm / (n + 1e-6)), written as
    max-norm / max(n + 1e-6, max-norm). The norm is ordinary ops of the step
    (a sum of squares per gradient, their sum, its square root), so the
    partitioner derives its collectives from the gradients' shardings: a
    piece split over data, tensor or ZeRO axes adds a partial sum that is
    all-reduced, a replicated piece counts once, and a pipeline sends each
    stage's sum where the scale is needed. An update with a `grad_scale` s
    (`-trellis-guard-updates`) divides its gradient by s as it reads it:
    its sum of squares is divided by s^2. The step returns the norm as a
    result marked `graph.metric = "grad_norm"` (before clipping), reported
    as `graph.report = {label = "grad norm", summary = "value"}`.

    ```mlir
    // Before
    %new, %m1, %v1 = graph.adamw %w, %g, %m, %v, %step ...
    // After
    %sq = graph.mul %g, %g
    %sum = graph.reduce_sum %sq dims [0, 1]
    %norm = graph.sqrt %sum                  // (sums of every gradient added)
    %scale = graph.div %max, (graph.maximum (%norm + 1e-6), %max)
    %clipped = graph.mul %g, %scale
    %new, %m1, %v1 = graph.adamw %w, %clipped, %m, %v, %step ...
    return ..., %norm {graph.metric = "grad_norm", graph.report = {...}}
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
    Option<"maxNorm", "max-norm", "double", "1.0",
           "The largest global gradient norm an update sees">,
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

def GuardUpdatesPass : Pass<"trellis-guard-updates", "::mlir::ModuleOp"> {
  let summary = "Skips the step's optimizer updates when a gradient is not finite";
  let description = [{
    After `-trellis-insert-optimizer` (and `-trellis-master-weights`), before
    `-trellis-clip-gradients`. Every update of the training step gets a
    `grad_scale` (OpEffects::gradientScaleOperand): an update whose gradient
    is a division by a scalar (the loss scale's unscale) reads the dividend
    and divides as it reads, so the unscale is no pass of its own; the
    verdict, the sum of every gradient's elements times zero (0, or NaN
    when one is infinite or NaN, or when the sum overflows f32, where
    AdamW's second moment would overflow too), is added to each grad_scale
    (1 where there was no division). An update whose grad_scale is not
    finite leaves its parameter and states unchanged, so a loss-scaled
    step skips an overflow before its updates and they may run in their
    operands' memory: no second copy of parameters, masters and moments,
    as in Megatron, whose unscale checks too. The sums are ordinary ops:
    the partitioner derives their collectives from the gradients'
    shardings, and a pipeline sends each stage's partial total on (only a
    scalar crosses a stage). The step returns the verdict as a result
    marked `graph.metric = "update_guard"`, from which the runtime learns
    whether the step was applied.

    ```mlir
    // Before
    %u = graph.div %g, %loss_scale
    %new, %m1, %v1 = graph.adamw %w, %u, %m, %v, %step ...
    // After
    %sum = graph.reduce_sum %g dims [0, 1]        // (every gradient's, added)
    %guard = graph.mul %sum, (graph.fill 0.0)
    %s = graph.add %loss_scale, %guard
    %new, %m1, %v1 = graph.adamw %w, %g, %m, %v, %step grad_scale %s ...
    return ..., %guard {graph.metric = "update_guard"}
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

def ExpertLoadPass : Pass<"trellis-expert-load", "::mlir::ModuleOp"> {
  let summary = "Returns the tokens each expert received in the step as a metric";
  let description = [{
    For a training step with mixture-of-experts layers: per layer (each
    graph.moe_route, in step order), how many of the step's slots chose
    each expert, [layers, experts] f32, summed over the micro-batches (and,
    once partitioned, over the data-parallel ranks), returned as a result
    marked `graph.metric = "expert_load"`, reported as its rows' worst max
    over mean (`graph.report = {label = "expert load max/mean", summary =
    "max_over_mean"}`). It reuses the layer's
    graph.expert_counts (the load-balancing loss's) or adds one. Every
    layer must route over the same number of experts.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

def ExpertBiasUpdatePass
    : Pass<"trellis-expert-bias-update", "::mlir::ModuleOp"> {
  let summary = "Moves each router's score bias towards the mean load";
  let description = [{
    DeepSeek-V3's auxiliary-loss-free load balancing (Megatron-Core's
    `moe_router_enable_expert_bias`): for each graph.moe_route whose bias is
    an argument of role "state" (e_score_correction_bias), the step returns
    the bias's new value (`graph.updates` = its argument),

      bias + rate * sign(mean_e(counts) - counts)

    with counts [E] the step's slots per expert (every micro-batch, and
    once partitioned every data-parallel rank: every rank moves the bias
    alike). Experts that received fewer slots than the mean become more
    likely to be chosen, those that received more less likely; the weights
    never see the bias.
    ```mlir
    %new = graph.expert_bias_update %bias, %counts rate 1.000000e-03
        : tensor<8xf32>, tensor<8xf32>
    return %loss, ..., %new : ...  // {graph.updates = <bias's argument>}
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
    Option<"rate", "rate", "double", "0.001",
           "How far each step moves a bias (DeepSeek-V3: 0.001)">,
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

#endif // TRELLIS_AUTODIFF_PASSES_TD
