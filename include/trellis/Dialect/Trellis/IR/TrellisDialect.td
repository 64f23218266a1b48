//===- TrellisDialect.td - The trellis dialect -------------*- tablegen -*-===//
//
// The dialect of distributed training: device meshes, tensor shardings over
// named mesh axes, and the collectives that move data between ranks.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_TD
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_TD

include "mlir/IR/DialectBase.td"

def Trellis_Dialect : Dialect {
  let name = "trellis";
  let cppNamespace = "::trellis";
  let summary = "Device meshes, shardings and collectives for distributed training";
  let description = [{
    A `trellis.mesh` declares named axes with sizes, major to minor; that order
    numbers the ranks. A `#trellis.sharding` states, for each dimension of a
    tensor, the ordered list of mesh axes it is split over, and the axes over
    which the value is partial (awaiting a reduction of a given kind); every
    other axis replicates the value. Collectives over named mesh axes move
    data between the ranks of a group: the ranks that differ only along those
    axes.

    Function arguments and results carry shardings in the `trellis.sharding`
    attribute; values inside a body get one through `trellis.shard`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The name of the argument and result attribute holding a sharding.
    static constexpr ::llvm::StringLiteral kShardingAttrName = "trellis.sharding";
    /// Unit attribute of a function whose values are per-rank shards (the
    /// partitioner's output): its argument and result shardings describe
    /// local types, so sizes need not divide.
    static constexpr ::llvm::StringLiteral kPartitionedAttrName =
        "trellis.partitioned";
    /// Attribute propagation leaves on ops: one #trellis.sharding per
    /// result.
    static constexpr ::llvm::StringLiteral kResultShardingsAttrName =
        "trellis.result_shardings";
    /// Op attribute (trellis-assign-stages): the virtual pipeline stage (an
    /// integer >= 0) an op of the micro-batch runs on.
    static constexpr ::llvm::StringLiteral kStageAttrName = "trellis.stage";
    /// Function attributes (trellis-assign-stages): the pipeline a step was
    /// cut for: ranks and chunks per rank (integers >= 1), layers per
    /// virtual stage (array<i64>, one per virtual stage), and the schedule
    /// (`gpipe`, `1f1b`, `interleaved`, `zb-h1`).
    static constexpr ::llvm::StringLiteral kPipelineStagesAttrName =
        "trellis.pipeline_stages";
    static constexpr ::llvm::StringLiteral kPipelineChunksAttrName =
        "trellis.pipeline_chunks";
    static constexpr ::llvm::StringLiteral kStageLayersAttrName =
        "trellis.stage_layers";
    static constexpr ::llvm::StringLiteral kPipelineScheduleAttrName =
        "trellis.pipeline_schedule";
    /// Function attributes of a pipeline stage's program
    /// (trellis-split-stages): the stage (an integer >= 0), the step it was
    /// cut from (a symbol name), and its schedule (an array of action names:
    /// `F3`, `RB3.c1`, `step`).
    static constexpr ::llvm::StringLiteral kPipelineStageAttrName =
        "trellis.pipeline_stage";
    static constexpr ::llvm::StringLiteral kStageOfAttrName =
        "trellis.stage_of";
    static constexpr ::llvm::StringLiteral kScheduleAttrName =
        "trellis.schedule";
    /// Op attribute in a stage's program: the action program the op belongs
    /// to (`forward.c0`, `backward_receive.c1`, `step`).
    static constexpr ::llvm::StringLiteral kProgramAttrName =
        "trellis.program";
    /// Attribute of a function argument or a trellis.shard whose sharding
    /// may split a dimension that its axis does not divide (the last
    /// pieces are padded with zeros): the global shape (array<i64>). Set
    /// by the ZeRO preset on optimizer states and parameters; the plan
    /// carries it as the argument's global_shape.
    static constexpr ::llvm::StringLiteral kPaddedAttrName = "trellis.padded";
    /// Attribute of a token input (i64 >= 2): the batch holds the sequence
    /// (dimension 1) in zigzag order of this many chunks
    /// (trellis/Common/SequenceChunks.h), which the data loader follows.
    /// Set by ring context parallelism; the plan carries it as the
    /// argument's sequence_chunks.
    static constexpr ::llvm::StringLiteral kSequenceChunksAttrName =
        "trellis.sequence_chunks";
    /// Argument attribute of a stage's program (unit): the stage holds the
    /// argument (allocates and initializes it).
    static constexpr ::llvm::StringLiteral kHeldAttrName = "trellis.held";
    /// Result attribute of a stage's program: the index of the step's result
    /// it is.
    static constexpr ::llvm::StringLiteral kResultIndexAttrName =
        "trellis.result";
    /// Attribute the partitioner leaves on single-result ops of a step of
    /// micro-batches (ops marked with graph.phase): the #trellis.sharding of
    /// the result's global value, whose local piece the result holds. The
    /// pipeline split reads it to send a tensor-parallel replicated value
    /// in pieces.
    static constexpr ::llvm::StringLiteral kLocalLayoutAttrName =
        "trellis.layout";

  private:
    /// Registers the attributes of TrellisAttrs.td.
    void registerAttributes();

  public:
  }];
}

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISDIALECT_TD
