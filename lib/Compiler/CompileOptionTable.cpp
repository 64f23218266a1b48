//===- CompileOptionTable.cpp - The options of `trellis compile` ----------===//

#include "trellis/Compiler/CompileOptionTable.h"

namespace trellis {

namespace {

constexpr const char *kModel = "Model and batch";
constexpr const char *kParallel = "Parallelism (mesh, pipeline, ZeRO)";
constexpr const char *kOptimizer = "Optimizer";
constexpr const char *kPrecision = "Precision, memory and fusion";
constexpr const char *kOutput = "Output and reports";

using O = CompileOptions;
using V = OptionValue;

/// --emit's word for what `o` writes.
V emitted(const O &o) {
  V value;
  value.text = o.emitMlir ? "mlir" : o.emitEstimate ? "estimate" : "plan";
  return value;
}

OptionRow<O> emitRow() {
  OptionRow<O> row{
      "emit",
      OptionType::String,
      [](O &o, const V &v) {
        o.emitMlir = v.text == "mlir";
        o.emitEstimate = v.text == "estimate";
      },
      kOutput,
      "What to write: plan (the plan file, default), mlir (the training "
      "step as MLIR) or estimate (JSON: what each rank computes, holds and "
      "sends, priced from the shardings before partitioning; docs/Report.md)",
      "plan|mlir|estimate"};
  row.get = emitted;
  row.choices = "plan,mlir,estimate";
  return row;
}

std::string checkZeroStage(const V &v) {
  if (v.integer >= 0 && v.integer <= 3)
    return "";
  return "expected a ZeRO stage 0, 1, 2 or 3, found " +
         std::to_string(v.integer);
}

/// `row` refusing what `check` refuses.
OptionRow<O> checked(OptionRow<O> row,
                     std::string (*check)(const OptionValue &)) {
  row.check = check;
  return row;
}

} // namespace

const std::vector<OptionRow<CompileOptions>> &compileOptionTable() {
  static const std::vector<OptionRow<O>> rows = {
      // Model and batch.
      fieldOption<&O::batch>("batch", kModel, "Batch size"),
      fieldOption<&O::seq>("seq", kModel, "Sequence length"),
      fieldOption<&O::microBatches>(
          "microbatches", kModel,
          "Split each batch into N micro-batches run one after the other, "
          "accumulating gradients (one optimizer step per batch)"),
      // Parallelism: the mesh (its degrees major to minor), then what each
      // axis splits.
      fieldOption<&O::mesh>(
          "mesh", kParallel,
          "Mesh axes, major to minor, instead of --pp/--dp/--ep/--cp/--tp: "
          "any names and order, each with a role (data, tensor, pipeline, "
          "context, expert) that dp, dp_replicate, dp_shard, tp, pp, cp and "
          "ep imply and other names state: pp=2,dp=2,tp=2 or "
          "replica:data=2,model:tensor=2",
          "dp=2,tp=2"),
      fieldOption<&O::pipeline>(
          "pp", kParallel,
          "Pipeline stages: split the layers over N ranks (the pp axis, major "
          "to dp and tp); --microbatches gives the micro-batches"),
      fieldOption<&O::dataParallel>(
          "dp", kParallel,
          "Data-parallel degree: split the batch over N ranks"),
      fieldOption<&O::expertParallel>(
          "ep", kParallel,
          "Expert-parallel degree: split each mixture-of-experts layer's "
          "experts over N ranks (an ep axis between dp and cp; the batch "
          "splits over it too)"),
      fieldOption<&O::contextParallel>(
          "cp", kParallel,
          "Context-parallel degree: split the sequence over N ranks (a cp "
          "axis between dp and tp; --cp-kind says how attention sees the "
          "whole sequence)"),
      fieldOption<&O::tensorParallel>(
          "tp", kParallel,
          "Tensor-parallel degree: split attention and MLP weights (Megatron "
          "layout) over N ranks"),
      fieldOption<&O::sequenceParallel>(
          "sp", kParallel,
          "Megatron sequence parallelism (with --tp): the norm regions split "
          "along the sequence over tp, each layer's all-reduces become a "
          "reduce-scatter and an all-gather"),
      fieldOption<&O::contextKind>(
          "cp-kind", kParallel,
          "ulysses (default): all_to_all from sequence pieces to head pieces "
          "around rotary embeddings and attention; allgather: keys and values "
          "gathered, each rank attends from its queries' place; ring: key and "
          "value blocks passed around the ring, the sequence in zigzag order "
          "(causal balance)",
          "", "ulysses,allgather,ring"),
      fieldOption<&O::expertDispatch>(
          "ep-dispatch", kParallel,
          "How tokens reach their experts under --ep: gather (default): every "
          "token all-gathered over ep, the products reduce-scattered back; "
          "all-to-all: the routed rows alone sent to the ranks holding their "
          "experts (after an exchange of the counts) and the products sent "
          "back",
          "", "gather,all-to-all"),
      fieldOption<&O::schedule>(
          "schedule", kParallel,
          "Pipeline schedule: gpipe, 1f1b (default), interleaved or zb-h1", "",
          "gpipe,1f1b,interleaved,zb-h1"),
      fieldOption<&O::chunks>(
          "chunks", kParallel,
          "Model chunks per pipeline rank (interleaved schedule)"),
      fieldOption<&O::stageLayers>(
          "pp-layers", kParallel,
          "Layers per virtual pipeline stage instead of the balanced split",
          "6,7,7,6"),
      checked(fieldOption<&O::zero>(
                  "zero", kParallel,
                  "ZeRO stage over the data axes: 0 (none), 1 (optimizer "
                  "states and fp32 masters split), 2 (and gradients "
                  "reduce-scattered per micro-batch into split "
                  "accumulators), 3 (and parameters split, gathered before "
                  "each use)"),
              checkZeroStage),
      fieldOption<&O::zeroAxes>(
          "zero-axes", kParallel,
          "The data axes ZeRO shards over, comma-separated (default: every "
          "data and expert axis); --mesh dp_replicate=2,dp_shard=4 --zero 3 "
          "--zero-axes dp_shard is HSDP",
          "dp_shard"),
      fieldOption<&O::bucketMiB>(
          "bucket-mib", kParallel,
          "Size of the fused data-parallel gradient reductions (MiB, default "
          "25)"),
      // Optimizer.
      fieldOption<&O::optimizer>(
          "optimizer", kOptimizer,
          "adamw (default), sgd, or none (the plan returns gradients)", "",
          "adamw,sgd,none"),
      fieldOption<&O::learningRate>("lr", kOptimizer,
                                    "Learning rate (default 1e-3)"),
      fieldOption<&O::beta1>("beta1", kOptimizer, "AdamW beta1 (default 0.9)"),
      fieldOption<&O::beta2>("beta2", kOptimizer,
                             "AdamW beta2 (default 0.999)"),
      fieldOption<&O::epsilon>("adam-eps", kOptimizer,
                               "AdamW epsilon (default 1e-8)"),
      fieldOption<&O::weightDecay>("weight-decay", kOptimizer,
                                   "Weight decay (default 0)"),
      fieldOption<&O::lrSchedule>(
          "lr-schedule", kOptimizer,
          "Learning-rate schedule (AdamW), peaking at --lr: constant (after "
          "the warmup), linear or cosine decay to --min-lr at --decay-steps, "
          "or wsd (warmup, stable, then a cosine decay over the last "
          "--wsd-decay-steps); the rate of each step comes from the step "
          "count, so a resumed run continues it (docs/Training.md has the "
          "formulas)",
          "", "constant,linear,cosine,wsd"),
      fieldOption<&O::warmupSteps>(
          "warmup-steps", kOptimizer,
          "Steps of linear warmup from 0 to --lr (with --lr-schedule)"),
      fieldOption<&O::decaySteps>(
          "decay-steps", kOptimizer,
          "The step the decay ends at, warmup included (with --lr-schedule "
          "linear, cosine or wsd)"),
      fieldOption<&O::wsdDecaySteps>(
          "wsd-decay-steps", kOptimizer,
          "The final decay's steps (--lr-schedule wsd)"),
      fieldOption<&O::minLearningRate>(
          "min-lr", kOptimizer,
          "The rate after the decay (with --lr-schedule; default 0)"),
      fieldOption<&O::clipGradNorm>(
          "clip-grad", kOptimizer,
          "Clip the gradients by their global L2 norm, as "
          "torch.nn.utils.clip_grad_norm_: each update sees its gradient "
          "times min(1, N / (norm + 1e-6)); the step reports the norm "
          "(default: no clipping)",
          "N"),
      fieldOption<&O::expertBiasUpdate>(
          "expert-bias-update", kOptimizer,
          "Move each router's score bias (DeepSeek-V3's "
          "e_score_correction_bias) by R per step towards the mean load: "
          "bias + R * sign(mean - slots per expert), as DeepSeek-V3 balances "
          "its experts without an auxiliary loss (its R: 0.001; default: the "
          "biases stay as loaded)",
          "R"),
      fieldOption<&O::decayOneDimensional>(
          "decay-1d", kOptimizer,
          "Apply --weight-decay to 1-D parameters (biases, norm gains) too; "
          "by default they are not decayed"),
      // Precision, memory and fusion.
      fieldOption<&O::precision>(
          "precision", kPrecision,
          "fp32 (default), bf16 or fp16: the forward and backward compute in "
          "bf16 or fp16 from fp32 master weights (the loss, cross-entropy and "
          "the optimizer in fp32); fp16 scales the loss dynamically",
          "", "fp32,bf16,fp16"),
      fieldOption<&O::gradReduceDtype>(
          "grad-reduce-dtype", kPrecision,
          "fp32 (default): data-parallel gradients are reduced in fp32; bf16 "
          "(with --precision bf16): in bf16, half the bytes",
          "", "fp32,bf16"),
      fieldOption<&O::recompute>(
          "recompute", kPrecision,
          "none (default); selective: the attention core (always: the fused "
          "attention backward recomputes its probabilities, so this is "
          "none); full: each layer's forward again before its backward "
          "instead of keeping its activations",
          "", "none,selective,full"),
      fieldOption<&O::fuse>(
          "fuse", kPrecision,
          "Fuse chains of elementwise ops into one pass each "
          "(-trellis-fuse-elementwise; --fuse=false keeps them apart)"),
      fieldOption<&O::fuseGradientAccumulation>(
          "fuse-gradient-accumulation", kPrecision,
          "Write each weight-gradient product as its fp32 gradient, "
          "unrounded, and with micro-batches add it straight into the step's "
          "total, as Megatron's gradient-accumulation fusion (default; ZeRO-2 "
          "and 3 reduce-scatter each product before its sum); =false rounds "
          "each product to the compute dtype, casts it and adds it, as "
          "PyTorch's autocast does"),
      fieldOption<&O::scheduleCollectives>(
          "schedule-collectives", kPrecision,
          "Issue each collective where a GEMM hides it "
          "(-trellis-schedule-collectives: under --sp the backward's gathers "
          "beside the data-gradient GEMMs, the reduce-scatters beside the "
          "weight-gradient GEMMs, as Megatron; default); =false leaves each "
          "right before its first reader"),
      // Output.
      emitRow(),
      fieldOption<&O::explain>(
          "explain", kOutput,
          "Report, op by op, which factors propagation split, which operands "
          "get resharded, and which large values stay replicated"),
      fieldOption<&O::report>(
          "report", kOutput,
          "Print per rank: parameters, activation estimate, and communication "
          "per step by collective kind and mesh axis"),
  };
  return rows;
}

std::string checkCompileOptionValues(const CompileOptions &options) {
  for (const OptionRow<CompileOptions> &row : compileOptionTable())
    if (std::string problem = checkOptionValue(row, row.get(options));
        !problem.empty())
      return "--" + std::string(row.name) + ": " + problem;
  return "";
}

} // namespace trellis
