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

} // namespace

const std::vector<OptionRow<CompileOptions>> &compileOptionTable() {
  static const std::vector<OptionRow<O>> rows = {
      // Model and batch.
      {"batch", OptionType::Int, [](O &o, const V &v) { o.batch = v.integer; },
       kModel, "Batch size"},
      {"seq", OptionType::Int, [](O &o, const V &v) { o.seq = v.integer; },
       kModel, "Sequence length"},
      {"microbatches", OptionType::Int,
       [](O &o, const V &v) { o.microBatches = v.integer; }, kModel,
       "Split each batch into N micro-batches run one after the other, "
       "accumulating gradients (one optimizer step per batch)"},
      // Parallelism.
      {"mesh", OptionType::String, [](O &o, const V &v) { o.mesh = v.text; },
       kParallel,
       "Mesh axes, major to minor, instead of --dp/--tp/--pp/--cp: any names "
       "and order, each with a role (data, tensor, pipeline, context, "
       "expert) that dp, dp_replicate, dp_shard, tp, pp, cp and ep imply and "
       "other names state: pp=2,dp=2,tp=2 or replica:data=2,model:tensor=2",
       "dp=2,tp=2"},
      {"dp", OptionType::Int,
       [](O &o, const V &v) { o.dataParallel = v.integer; }, kParallel,
       "Data-parallel degree: split the batch over N ranks"},
      {"tp", OptionType::Int,
       [](O &o, const V &v) { o.tensorParallel = v.integer; }, kParallel,
       "Tensor-parallel degree: split attention and MLP weights (Megatron "
       "layout) over N ranks"},
      {"pp", OptionType::Int, [](O &o, const V &v) { o.pipeline = v.integer; },
       kParallel,
       "Pipeline stages: split the layers over N ranks (the pp axis, major "
       "to dp and tp); --microbatches gives the micro-batches"},
      {"cp", OptionType::Int,
       [](O &o, const V &v) { o.contextParallel = v.integer; }, kParallel,
       "Context-parallel degree: split the sequence over N ranks (a cp axis "
       "between dp and tp; --cp-kind says how attention sees the whole "
       "sequence)"},
      {"ep", OptionType::Int,
       [](O &o, const V &v) { o.expertParallel = v.integer; }, kParallel,
       "Expert-parallel degree: split each mixture-of-experts layer's "
       "experts over N ranks (an ep axis between dp and cp; the batch "
       "splits over it too)"},
      {"schedule", OptionType::String,
       [](O &o, const V &v) { o.schedule = v.text; }, kParallel,
       "Pipeline schedule: gpipe, 1f1b (default), interleaved or zb-h1"},
      {"chunks", OptionType::Int,
       [](O &o, const V &v) { o.chunks = v.integer; }, kParallel,
       "Model chunks per pipeline rank (interleaved schedule)"},
      {"pp-layers", OptionType::String,
       [](O &o, const V &v) { o.stageLayers = v.text; }, kParallel,
       "Layers per virtual pipeline stage instead of the balanced split",
       "6,7,7,6"},
      {"zero", OptionType::Int, [](O &o, const V &v) { o.zero = v.integer; },
       kParallel,
       "ZeRO stage over the data axes: 0 (none), 1 (optimizer states and "
       "fp32 masters split), 2 (and gradients reduce-scattered per "
       "micro-batch into split accumulators), 3 (and parameters split, "
       "gathered before each use)"},
      {"zero-axes", OptionType::String,
       [](O &o, const V &v) { o.zeroAxes = v.text; }, kParallel,
       "The data axes ZeRO shards over, comma-separated (default: every data "
       "and expert axis); --mesh dp_replicate=2,dp_shard=4 --zero 3 "
       "--zero-axes dp_shard is HSDP",
       "dp_shard"},
      {"sp", OptionType::Bool,
       [](O &o, const V &v) { o.sequenceParallel = v.flag; }, kParallel,
       "Megatron sequence parallelism (with --tp): the norm regions split "
       "along the sequence over tp, each layer's all-reduces become a "
       "reduce-scatter and an all-gather"},
      {"cp-kind", OptionType::String,
       [](O &o, const V &v) { o.contextKind = v.text; }, kParallel,
       "ulysses (default): all_to_all from sequence pieces to head pieces "
       "around rotary embeddings and attention; allgather: keys and values "
       "gathered, each rank attends from its queries' place; ring: key and "
       "value blocks passed around the ring, the sequence in zigzag order "
       "(causal balance)"},
      {"ep-dispatch", OptionType::String,
       [](O &o, const V &v) { o.expertDispatch = v.text; }, kParallel,
       "How tokens reach their experts under --ep: gather (default): every "
       "token all-gathered over ep, the products reduce-scattered back; "
       "all-to-all: the routed rows alone sent to the ranks holding their "
       "experts (after an exchange of the counts) and the products sent "
       "back"},
      {"bucket-mib", OptionType::Double,
       [](O &o, const V &v) { o.bucketMiB = v.number; }, kParallel,
       "Size of the fused data-parallel gradient reductions (MiB, default "
       "25)"},
      {"schedule-collectives", OptionType::Bool,
       [](O &o, const V &v) { o.scheduleCollectives = v.flag; }, kParallel,
       "Issue each collective where a GEMM hides it "
       "(-trellis-schedule-collectives: under --sp the backward's gathers "
       "beside the data-gradient GEMMs, the reduce-scatters beside the "
       "weight-gradient GEMMs, as Megatron; default); =false leaves each "
       "right before its first reader"},
      // Optimizer.
      {"optimizer", OptionType::String,
       [](O &o, const V &v) { o.optimizer = v.text; }, kOptimizer,
       "adamw (default), sgd, or none (the plan returns gradients)"},
      {"lr", OptionType::Double,
       [](O &o, const V &v) { o.learningRate = v.number; }, kOptimizer,
       "Learning rate (default 1e-3)"},
      {"beta1", OptionType::Double,
       [](O &o, const V &v) { o.beta1 = v.number; }, kOptimizer,
       "AdamW beta1 (default 0.9)"},
      {"beta2", OptionType::Double,
       [](O &o, const V &v) { o.beta2 = v.number; }, kOptimizer,
       "AdamW beta2 (default 0.999)"},
      {"adam-eps", OptionType::Double,
       [](O &o, const V &v) { o.epsilon = v.number; }, kOptimizer,
       "AdamW epsilon (default 1e-8)"},
      {"weight-decay", OptionType::Double,
       [](O &o, const V &v) { o.weightDecay = v.number; }, kOptimizer,
       "Weight decay (default 0)"},
      {"lr-schedule", OptionType::String,
       [](O &o, const V &v) { o.lrSchedule = v.text; }, kOptimizer,
       "Learning-rate schedule (AdamW), peaking at --lr: constant (after "
       "the warmup), linear or cosine decay to --min-lr at --decay-steps, or "
       "wsd (warmup, stable, then a cosine decay over the last "
       "--wsd-decay-steps); the rate of each step comes from the step count, "
       "so a resumed run continues it (docs/Training.md has the formulas)"},
      {"warmup-steps", OptionType::Int,
       [](O &o, const V &v) { o.warmupSteps = v.integer; }, kOptimizer,
       "Steps of linear warmup from 0 to --lr (with --lr-schedule)"},
      {"decay-steps", OptionType::Int,
       [](O &o, const V &v) { o.decaySteps = v.integer; }, kOptimizer,
       "The step the decay ends at, warmup included (with --lr-schedule "
       "linear, cosine or wsd)"},
      {"wsd-decay-steps", OptionType::Int,
       [](O &o, const V &v) { o.wsdDecaySteps = v.integer; }, kOptimizer,
       "The final decay's steps (--lr-schedule wsd)"},
      {"min-lr", OptionType::Double,
       [](O &o, const V &v) { o.minLearningRate = v.number; }, kOptimizer,
       "The rate after the decay (with --lr-schedule; default 0)"},
      {"clip-grad", OptionType::Double,
       [](O &o, const V &v) { o.clipGradNorm = v.number; }, kOptimizer,
       "Clip the gradients by their global L2 norm, as "
       "torch.nn.utils.clip_grad_norm_: each update sees its gradient times "
       "min(1, N / (norm + 1e-6)); the step reports the norm (default: no "
       "clipping)",
       "N"},
      {"expert-bias-update", OptionType::Double,
       [](O &o, const V &v) { o.expertBiasUpdate = v.number; }, kOptimizer,
       "Move each router's score bias (DeepSeek-V3's "
       "e_score_correction_bias) by R per step towards the mean load: bias "
       "+ R * sign(mean - slots per expert), as DeepSeek-V3 balances its "
       "experts without an auxiliary loss (its R: 0.001; default: the "
       "biases stay as loaded)",
       "R"},
      {"decay-1d", OptionType::Bool,
       [](O &o, const V &v) { o.decayOneDimensional = v.flag; }, kOptimizer,
       "Apply --weight-decay to 1-D parameters (biases, norm gains) too; by "
       "default they are not decayed"},
      // Precision, memory and fusion.
      {"precision", OptionType::String,
       [](O &o, const V &v) { o.precision = v.text; }, kPrecision,
       "fp32 (default), bf16 or fp16: the forward and backward compute in "
       "bf16 or fp16 from fp32 master weights (the loss, cross-entropy and "
       "the optimizer in fp32); fp16 scales the loss dynamically"},
      {"grad-reduce-dtype", OptionType::String,
       [](O &o, const V &v) { o.gradReduceDtype = v.text; }, kPrecision,
       "fp32 (default): data-parallel gradients are reduced in fp32; bf16 "
       "(with --precision bf16): in bf16, half the bytes"},
      {"recompute", OptionType::String,
       [](O &o, const V &v) { o.recompute = v.text; }, kPrecision,
       "none (default); selective: the attention core (always: the fused "
       "attention backward recomputes its probabilities, so this is none); "
       "full: each layer's forward again before its backward instead of "
       "keeping its activations"},
      {"fuse", OptionType::Bool, [](O &o, const V &v) { o.fuse = v.flag; },
       kPrecision,
       "Fuse chains of elementwise ops into one pass each "
       "(-trellis-fuse-elementwise; --fuse=false keeps them apart)"},
      {"fuse-gradient-accumulation", OptionType::Bool,
       [](O &o, const V &v) { o.fuseGradientAccumulation = v.flag; },
       kPrecision,
       "Write each weight-gradient product as its fp32 gradient, unrounded, "
       "and with micro-batches add it straight into the step's total, as "
       "Megatron's gradient-accumulation fusion (default; ZeRO-2 and 3 "
       "reduce-scatter each product before its sum); =false rounds each "
       "product to the compute dtype, casts it and adds it, as PyTorch's "
       "autocast does"},
      // Output.
      {"emit", OptionType::String,
       [](O &o, const V &v) {
         o.emitMlir = v.text == "mlir";
         o.emitEstimate = v.text == "estimate";
       },
       kOutput,
       "What to write: plan (the plan file, default), mlir (the training "
       "step as MLIR) or estimate (JSON: what each rank computes, holds and "
       "sends, priced from the shardings before partitioning; docs/Report.md)",
       "plan|mlir|estimate"},
      {"explain", OptionType::Bool,
       [](O &o, const V &v) { o.explain = v.flag; }, kOutput,
       "Report, op by op, which factors propagation split, which operands "
       "get resharded, and which large values stay replicated"},
      {"report", OptionType::Bool, [](O &o, const V &v) { o.report = v.flag; },
       kOutput,
       "Print per rank: parameters, activation estimate, and communication "
       "per step by collective kind and mesh axis"},
  };
  return rows;
}

std::string checkCompileOptionValue(const OptionRow<CompileOptions> &row,
                                    const OptionValue &value) {
  if (std::string(row.name) == "emit" && value.text != "plan" &&
      value.text != "mlir" && value.text != "estimate")
    return "expected plan, mlir or estimate, found '" + value.text + "'";
  return "";
}

} // namespace trellis
