//===- Passes.td - Sharding passes -------------------------*- tablegen -*-===//

#ifndef TRELLIS_SHARDING_PASSES_TD
#define TRELLIS_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ApplyPresetPass : Pass<"trellis-apply-preset", "::mlir::ModuleOp"> {
  let summary = "Declares the mesh and annotates a training step for a preset";
  let description = [{
    Writes annotations only; the partitioner derives every collective.
    Declares `trellis.mesh @mesh` with the axes of `mesh` (`dp=2,tp=2`, any
    names and order, roles as trellis/Common/Mesh.h says: `rows:data=2`),
    or, without it, `<["dp"=D, "cp"=C, "tp"=T]>` from the degree options
    (cp only when C > 1), and annotates the arguments of the function by
    the axes' roles:
    - data and expert axes (the batch's): the batch dimension of the
      `tokens` and `targets` inputs is split over all of them, major to
      minor.
    - context axis: the inputs' sequence is split over it.
    - tensor axis (Megatron layout, by Hugging Face parameter name):
      attention q/k/v and MLP up/gate weights split by their output
      features, attention output and MLP down weights by their input
      features; which dimension that is, the program says: the first
      matmul (in block order: the forward's) that reads the weight, through
      reshapes, slices and casts, reads it transposed for nn.Linear's
      [out, in] and untransposed for Conv1D's [in, out] (GPT-2's names on
      nanoGPT's nn.Linear weights split as nn.Linear); without such a
      matmul, the layout the name implies (Llama's Linear, GPT-2's Conv1D).
      The MLP up bias with its columns; embedding tables and the LM head
      by vocabulary rows (the lookup masks ids outside a rank's rows, the
      loss combines the split logits without gathering them). Optimizer
      moments follow their parameter. A fused QKV weight, held as
      [E, 3, E] (Conv1D) or [3, E, E] (nn.Linear), bias [3, E], splits each
      piece's output features: each rank gets its heads of q, k and v; one
      held whole ([3E, E]) is an error.

    Arguments that already carry a `trellis.sharding` (the user's) keep it.

    Preconditions: every axis has a role, at most one is tensor and at most
    one context, none is pipeline (the pipeline phase adds that axis); the
    function (option `function`, default `train_step`) has inputs named
    tokens and targets (graph.param) whose batch divides by the batch axes'
    ranks, and every split dimension divides by its axis. Errors name the
    argument and the sizes.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "Function to annotate">,
    Option<"meshText", "mesh", "std::string", "\"\"",
           "The step's mesh, major to minor (`dp=2,tp=2`, `rows:data=2`); "
           "excludes the degree options">,
    Option<"dataParallel", "dp", "int64_t", "1",
           "Data-parallel degree (without `mesh`)">,
    Option<"tensorParallel", "tp", "int64_t", "1",
           "Tensor-parallel degree (without `mesh`)">,
    Option<"contextParallel", "cp", "int64_t", "1",
           "Context-parallel degree (without `mesh`): the inputs' sequence "
           "split over a \"cp\" axis (between dp and tp)">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def ApplyZeroPass : Pass<"trellis-apply-zero", "::mlir::ModuleOp"> {
  let summary = "Annotates a training step for a ZeRO stage";
  let description = [{
    Writes annotations only, over the mesh axes `axes` (default: every
    axis of the step's mesh the batch splits over, its data and expert
    axes; `axes=dp_shard` alone shards within each replica, HSDP), whose
    ranks together must be more than one; propagation and partitioning
    derive the collectives (below, "dp" is those axes together):
    - stage 1: the optimizer states (arguments of role adam_m, adam_v and
      master) are split over dp. A partial gradient meeting a split state
      is a reduce_scatter; the updated piece meeting the parameter's
      replicated layout after the step is an all_gather. A gradient that
      more than its update reads (clipping's squares, fp16's verdict),
      found from the update through the scalar scalings it reads it by,
      gets a `trellis.shard` constraint where the step has it: every
      reader takes the split piece, none the gradient whole.
    - stage 2: as stage 1, and each gradient a micro-batch hands to an
      update gets a `trellis.shard` constraint right after the op that
      makes it (in its phase and part) with the layout of the state it
      updates: it is reduce-scattered where the backward makes it (into a
      sharded accumulator when the step has micro-batches), its full
      buffer dies there, and every reader takes the split piece.
    - stage 3: as stage 2, and the parameters (role param) are split over
      dp too; their uses are grouped by phase and model part, and each
      group reads the parameter through its own whole-layout constraint,
      placed where the part before it in that phase begins: the
      partitioner all-gathers it there (prefetch), and again for the
      backward instead of keeping the forward's copy.
    Below stage 3 the parameters' layout is fixed (replicated over dp).
    Gradient casts back to f32 marked graph.reduce_first (gradients reduced
    in bf16) move to their update. The split goes on the first dimension
    that divides by dp: a whole one first (dimension 0 preferred), else one
    another axis (tp) splits whose piece divides further, else the largest
    whole one, unevenly: its last pieces are padded, and `trellis.padded`
    records the whole shape. A tensor whose every dimension is split
    already stays replicated, named in a warning. Annotations already on
    an argument that use dp are kept. Stages 1 and 2 need optimizer states
    (an error otherwise); stage 0 does nothing.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
    Option<"stage", "stage", "int64_t", "1", "The ZeRO stage (0-3)">,
    ListOption<"axes", "axes", "std::string",
               "The mesh axes to shard over, major to minor (default: the "
               "mesh's data and expert axes)">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def ApplyExpertParallelPass
    : Pass<"trellis-apply-expert-parallel", "::mlir::ModuleOp"> {
  let summary = "Annotates a training step for expert parallelism";
  let description = [{
    Splits each mixture-of-experts weight (the `weight` of an
    expert_matmul, through casts) and its optimizer states along their
    expert dimension over @mesh's expert axes, and marks every
    expert_matmul and expert_matmul_weight_grad with those `axes`: each
    rank holds a contiguous range of the experts and computes the slots
    routed to them. The tokens split over the expert axes as over data
    axes; the expert ops read theirs whole over the expert axes
    (constraints: the partitioner all-gathers them), and each
    expert_matmul's result, partial over the expert axes (zeros where the
    slot's expert lives elsewhere), is constrained back to the batch's
    split (a reduce_scatter). The expert weights' gradients are then
    partial over the data axes only: their reductions run over the experts'
    own group. The expert count must divide by the expert axes' size, and
    a mesh with expert axes needs a model with experts: errors name both.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def ApplySequenceParallelPass
    : Pass<"trellis-apply-sequence-parallel", "::mlir::ModuleOp"> {
  let summary = "Annotates a training step for Megatron sequence parallelism";
  let description = [{
    Writes constraints only (`trellis.shard`), over the tensor-parallel axis
    (`axis`, default: @mesh's axis of role tensor, which must have more than
    one rank):
    the value each norm (rms_norm, layer_norm) reads, the residual stream,
    is split along its sequence (the dimension before the features) where
    it is made, for every user; each norm's result is whole again for its
    users, with one constraint per phase of them (the backward gathers
    again). The partitioner derives Megatron's collectives: a row-parallel
    matmul's partial output meeting the split stream is a reduce_scatter,
    the split norm output meeting the column-parallel matmuls an
    all_gather, and in the backward the norm gradients' partial inputs are
    reduce-scattered and the norm outputs gathered again for the weight
    gradients. A norm whose sequence the axis does not divide is an error
    naming the sizes.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
    Option<"axis", "axis", "std::string", "\"\"",
           "The tensor-parallel mesh axis (default: @mesh's tensor axis)">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def ApplyContextParallelPass
    : Pass<"trellis-apply-context-parallel", "::mlir::ModuleOp"> {
  let summary = "Annotates a training step for context parallelism";
  let description = [{
    The inputs' sequence is split over @mesh's context axis (by
    -trellis-apply-preset="cp=N"), and propagation carries the split through
    every per-token op; rope rotates a piece from its place.
    - `kind=ulysses`: the 4-D [batch, seq, heads, head_dim] operands of
      rope and attention are constrained, where they are made, to be split
      by heads over tp then cp, the sequence whole: the partitioner turns
      the sequence pieces into head pieces with all_to_alls before them,
      and back after attention. Heads (kv heads with grouped-query
      attention) must divide by tp x cp: an error names the counts.
    - `kind=allgather`: each attention's keys and values are constrained
      whole along the sequence (an all_gather over cp); its queries stay
      the rank's piece and attend from their place; the key and value
      gradients, partial over cp, are reduce-scattered home.
    - `kind=ring`: the all-gather layout, the key and value gradients
      constrained to the sequence split where attention_grad makes them,
      for -trellis-lower-ring-attention to turn into a ring. With
      `load-balance` (the default), the sequence is stored in zigzag order
      of 2 x cp chunks (trellis/Common/SequenceChunks.h): the token inputs
      carry trellis.sequence_chunks (the data loader follows it) and every
      position-aware op (rope, attention, attention_grad, positions) its
      `chunks`, so that each rank holds one early and one late chunk and
      the causal ring does equal work on every rank. The sequence must
      divide by 2 x cp: an error names the sizes.
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"train_step\"",
           "The training step">,
    Option<"kind", "kind", "std::string", "\"ulysses\"",
           "ulysses, allgather or ring">,
    Option<"loadBalance", "load-balance", "bool", "true",
           "ring: store the sequence in zigzag order (causal balance)">
  ];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def LowerExpertAllToAllPass
    : Pass<"trellis-lower-expert-all-to-all", "::mlir::func::FuncOp"> {
  let summary = "Gives expert parallelism the all-to-all dispatch";
  let description = [{
    Runs on a partitioned program. The partitioner gives each expert op
    with `axes` the all-gather form: its token operands (lhs, experts,
    result_grad) all_gathered over the axes along dimension 0, and an
    expert_matmul's result, partial over them, reduce-scattered back. This
    pass rewrites each op of that form to take this rank's own slots and
    set `dispatch = "all_to_all"`: its kernel exchanges the slots' counts,
    then sends each slot's row to the rank holding its expert (and an
    expert_matmul's products back), so a rank sends only its routed rows
    instead of receiving every rank's tokens. The gathers and the
    reduce_scatter go where nothing else reads them. Values are unchanged:
    each slot's product is computed by the same rank from the same row, and
    a weight gradient sums its slots in the same order (the group's ranks
    in order, each rank's slots in order).
  }];
  let dependentDialects = ["::trellis::TrellisDialect",
                           "::trellis::graph::GraphDialect"];
}

def LowerRingAttentionPass
    : Pass<"trellis-lower-ring-attention", "::mlir::func::FuncOp"> {
  let summary = "Lowers attention over gathered keys and values to a ring";
  let description = [{
    Runs on a partitioned program. Each graph.attention whose queries are
    split along the sequence over mesh axes A (its `axes`) and whose keys
    and values are all_gathers of this rank's blocks over A along the
    sequence becomes a ring of N = |A| steps (Liu et al., 2023): step i
    attends to the block of the rank i places before (attention_block
    with shift i) while that block passes on to the next rank
    (collective_permute shift 1, issued before the step's compute so that
    the transfer overlaps it); attention_merge combines the blocks by
    their log-sum-exp. Each graph.attention_grad of that form whose key
    and value gradients are reduce-scattered over A becomes the backward
    ring: every step adds its block's gradient contributions to the key
    and value gradients that travel with the block, and a last permute
    brings them home, replacing the reduce_scatters. The backward reads
    the forward ring's result and log-sum-exp (or recomputes them when no
    forward attention of the same operands is in the function).
  }];
  let dependentDialects = ["::trellis::TrellisDialect",
                           "::trellis::graph::GraphDialect"];
}

def PropagateShardingsPass
    : Pass<"trellis-propagate-shardings", "::mlir::func::FuncOp"> {
  let summary = "Gives every value a sharding from the annotated ones";
  let description = [{
    Starting from argument shardings (`trellis.sharding`), propagates
    through each op's factor-based sharding rule, forwards and backwards, to
    a fixpoint: a factor takes the axes of the first tensor dimension that
    has them (argument annotations are never changed), and every dimension
    of that factor that is still unsplit takes them too, unless the factor
    must stay whole, the axis is already used by the tensor, or the size
    does not divide. Results whose split factors they lack are partial over
    those axes.

    Postconditions: every op with results carries
    `trellis.result_shardings`, one `#trellis.sharding` per result; values
    that no sharding reached are replicated. With `explain`, a remark on
    each op tells which factors were split and why a large value stayed
    replicated.
  }];
  let options = [
    Option<"explain", "explain", "bool", "false",
           "Emit remarks on where shardings came from">
  ];
}

def PartitionPass : Pass<"trellis-partition", "::mlir::func::FuncOp"> {
  let summary = "Rewrites a sharded function into its per-rank program";
  let description = [{
    Preconditions: shardings propagated (`trellis.result_shardings` on every
    op). Rewrites every value to its local shape and inserts, where the
    sharding a value has differs from the one its user needs, the cheapest
    collective: partial -> replicated all_reduce; partial -> split
    reduce_scatter; split -> replicated all_gather; split along another
    dimension all_to_all; replicated -> split a local `trellis.slice_shard`.
    Function results become replicated. Postconditions: the function is
    marked `trellis.partitioned`; no `trellis.result_shardings` remain.
  }];
  let dependentDialects = ["::trellis::TrellisDialect"];
}

def PrintShardedCostPass
    : Pass<"trellis-print-sharded-cost", "::mlir::func::FuncOp"> {
  let summary = "Reports what one rank computes and sends, priced before partitioning";
  let description = [{
    The cost query (`trellis/Sharding/ShardingCost.h`) as a pass, for
    inspection and tests. Preconditions: shardings propagated. Each function
    gets a remark: `per rank: <flops> flops, <read> bytes read, <written>
    bytes written, then for each collective and its mesh axes `; <kind> over
    <axes>: <calls> calls, <bytes> bytes, <sent> sent`: the collectives
    `-trellis-partition` would insert, with what each rank hands over and
    sends under ring algorithms, and the FLOPs of each op's piece. Changes
    nothing. `trellis compile --emit estimate` prints the same figures as
    JSON.

    A step cut into pipeline stages (`trellis.pipeline_stages`, ops marked
    by -trellis-assign-stages) gets one remark per pipeline rank, with its
    sends and receives over `pipeline-axis` (values replicated over
    `piece-axis` are sent in pieces); with `ring-attention`, attention over
    a sequence split by context parallelism is priced as its ring.
  }];
  let options = [
    Option<"pipelineAxis", "pipeline-axis", "std::string", "\"pp\"",
           "The mesh axis of the pipeline's transfers">,
    Option<"pieceAxis", "piece-axis", "std::string", "\"\"",
           "The axis values replicated over it are sent in pieces over">,
    Option<"ringAttention", "ring-attention", "bool", "false",
           "Price attention over a split sequence as its ring">,
  ];
}

def ScheduleCollectivesPass
    : Pass<"trellis-schedule-collectives", "::mlir::func::FuncOp"> {
  let summary = "Issues each collective of a partitioned step where compute hides it";
  let description = [{
    The runtime issues a collective where the program has it and waits for
    it at its first reader; what runs between the two hides it. This pass
    reorders a partitioned function's ops (the rule of
    lib/Sharding/CollectiveSchedule.h, which the cost query prices too):

    1. each collective moves up past the ops before it, as long as it does
       not read their results, until it has passed one compute-bound op
       (more than 8 FLOPs per byte moved: a matmul, an attention), or meets
       another collective, an op that communicates inside its kernel, or
       an op of another phase (forward; backward and weight gradients;
       the step);
    2. when no compute-bound op then runs between the collective and its
       first reader, the nearest compute-bound op before it whose results
       nothing up to the collective reads moves right after it (not from
       before an op that waits for another collective).

    Under sequence parallelism that is Megatron's backward: the all-gather
    of a layer's input runs beside the data-gradient GEMM, and the data
    gradient's reduce-scatter beside the weight-gradient GEMM. ZeRO-3's
    gathers are issued one GEMM before their reader (a prefetch).
    Collectives keep their order among themselves (the communication
    stream runs in order); values and numerics are unchanged.

    ```mlir
    // Before: the input is gathered right before the GEMM that reads it
    %dx = graph.matmul %dy, %w : ...
    %x = trellis.all_gather %x_seq over @mesh ["tp"] dim 1 : ...
    %dw = graph.matmul %x transposed, %dy : ...
    // After: gathered while the data gradient is computed
    %x = trellis.all_gather %x_seq over @mesh ["tp"] dim 1 : ...
    %dx = graph.matmul %dy, %w : ...
    %dw = graph.matmul %x transposed, %dy : ...
    ```
  }];
}

def BucketAllReducesPass
    : Pass<"trellis-bucket-all-reduces", "::mlir::func::FuncOp"> {
  let summary = "Fuses all_reduces (and ZeRO's reduce_scatters and all_gathers) into buckets issued as soon as ready";
  let description = [{
    Groups the f32 `trellis.all_reduce` ops of a partitioned function that
    share mesh, axes and kind (the data-parallel gradient reductions) into
    buckets of about `bucket-bytes` each, in the order their operands are
    produced: in a training step that is the backward order, last layer
    first. Each bucket flattens and concatenates its operands, reduces them
    with one all_reduce placed right after the last of them is produced
    (so it can overlap the rest of the backward pass), and slices the
    results back out. The reductions the step's loss (a scalar first
    result that is no update) depends on stay alone: the plan's forward-
    only evaluation reduces the loss without any gradient.

    ZeRO's reduce_scatters and all_gathers that split dimension 0 are
    bucketed too (`BucketShards.cpp`): members are reshaped to [ranks,
    elements / ranks] and concatenated along dimension 1, so row r holds
    every member's piece r; one collective moves the matrix and slices
    give each member back. A scatter bucket is issued after its last
    operand is made; a gather bucket where its first member was, and it
    never spans phases or model parts (each part gathers its own
    parameters, once per phase).

    All-reduces inside a micro-batch (ops marked with `graph.phase`) stay
    alone: only the step's are bucketed. With `per-part` (steps that a
    pipeline cuts later), reductions of values no model part made stay
    alone too, and a bucket holds the gradients of one model part only
    (graph.part of the op that made them), so that every bucket belongs to
    one pipeline stage.

    ```mlir
    // Before: two reductions at the end of the step
    %a = trellis.all_reduce %ga over @mesh ["dp"] sum : tensor<4x4xf32>
    %b = trellis.all_reduce %gb over @mesh ["dp"] sum : tensor<8xf32>
    // After: one, right after %gb is produced
    %flat = graph.concat %ga_flat, %gb_flat dim 0 : tensor<16xf32>, tensor<8xf32>
    %sum = trellis.all_reduce %flat over @mesh ["dp"] sum : tensor<24xf32>
    ```
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25 << 20",
           "Bytes per bucket (a reduction larger than this is alone)">,
    Option<"perPart", "per-part", "bool", "false",
           "Keep each bucket within one model part (for a pipeline split)">
  ];
  let dependentDialects = ["::trellis::graph::GraphDialect"];
}

#endif // TRELLIS_SHARDING_PASSES_TD
