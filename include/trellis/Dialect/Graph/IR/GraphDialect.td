//===- GraphDialect.td - The graph op set ------------------*- tablegen -*-===//
//
// Tensor operations of models and their training steps: what the importer
// emits, what autodiff differentiates, what the runtime executes.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_TD
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_TD

include "mlir/IR/DialectBase.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let cppNamespace = "::trellis::graph";
  let summary = "The tensor op set of Trellis models and training steps";
  let description = [{
    Value-semantics ops on ranked, statically shaped tensors of f32 (token ids
    are i32). Every op infers its result types, and implements the sharding
    rule, gradient and cost interfaces, so that passes never need to know an
    op by name.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Registers the dialect's attributes (GraphAttrs.cpp).
    void registerAttributes();
    /// Function argument attribute: the role of a training-step argument
    /// ("param", "input", "adam_m", "adam_v", "momentum", "step", or
    /// "state": an f32 tensor the model reads that no gradient trains, which
    /// checkpoints and weight files carry under its graph.param name, as
    /// PyTorch's persistent buffers: DeepSeek-V3's e_score_correction_bias).
    static constexpr ::llvm::StringLiteral kRoleAttrName = "graph.role";
    /// Function argument attribute: the name of a parameter (Hugging Face
    /// tensor name), also on the optimizer states that belong to it.
    static constexpr ::llvm::StringLiteral kParamNameAttrName = "graph.param";
    /// Function argument attribute: how a parameter is initialized
    /// ("normal:<std>", "zeros", "ones").
    static constexpr ::llvm::StringLiteral kInitAttrName = "graph.init";
    /// Function argument attribute: the shape checkpoints store a parameter
    /// under when it differs from its type's (same row-major elements).
    static constexpr ::llvm::StringLiteral kFileShapeAttrName =
        "graph.file_shape";
    /// Function result attribute: index of the argument this result updates.
    static constexpr ::llvm::StringLiteral kUpdatesAttrName = "graph.updates";
    /// Function result attribute: the name of a figure of the step
    /// ("grad_norm": the global gradient norm before clipping;
    /// "update_guard": what the step's updates are guarded by).
    static constexpr ::llvm::StringLiteral kMetricAttrName = "graph.metric";
    /// Function result attribute beside graph.metric: how the runtime
    /// reports the figure after each step, {label = "grad norm", summary =
    /// "value" | "max_over_mean"} (trellis/Common/StepMetric.h); a metric
    /// without one is not reported.
    static constexpr ::llvm::StringLiteral kReportAttrName = "graph.report";
    /// Op attribute: the model part (#graph.part) the op belongs to. Read
    /// it through getModelPart (GraphAttrs.h).
    static constexpr ::llvm::StringLiteral kPartAttrName = "graph.part";
    /// Function attribute of a training step: the micro-batches each step
    /// runs (an integer >= 1). The ops marked with graph.phase run once per
    /// micro-batch, over inputs that hold one micro-batch.
    static constexpr ::llvm::StringLiteral kMicroBatchesAttrName =
        "graph.micro_batches";
    /// Op attribute (steps of several micro-batches, or pipelined): the op
    /// runs once per micro-batch, in its "forward", "backward", or "weight"
    /// (backward ops that only make parameter gradients) phase; absent on
    /// ops of the whole step (loss average, gradient reductions,
    /// optimizer), which run once after every micro-batch.
    static constexpr ::llvm::StringLiteral kPhaseAttrName = "graph.phase";
    /// Op attribute: "f32" keeps an op that computes in the compute dtype
    /// in fp32 under mixed precision (its operands cast up, its parameters
    /// read uncast): DeepSeek-V3's router, as transformers computes it.
    static constexpr ::llvm::StringLiteral kPrecisionAttrName =
        "graph.precision";
    /// Unit attribute of a graph.cast: a partial-sum operand is reduced
    /// before the cast, not after it (the cast is not linear for sharding).
    /// On a parameter's compute cast, its gradient's cast back inherits it:
    /// data-parallel gradients are then reduced in the compute dtype.
    static constexpr ::llvm::StringLiteral kReduceFirstAttrName =
        "graph.reduce_first";
  }];
}

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHDIALECT_TD
