//===- GraphOps.td - Operations of the graph dialect -------*- tablegen -*-===//
//
// Shapes: ranked, static. Elementwise ops broadcast as NumPy does (trailing
// dimensions aligned, size-1 dimensions stretched). Activations are laid out
// [batch, sequence, features]; attention takes [batch, sequence, heads, dim].
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_TD
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "trellis/Dialect/Graph/IR/GraphDialect.td"
include "trellis/Dialect/Graph/IR/GraphEnums.td"
include "trellis/Dialect/Graph/IR/GraphInterfaces.td"

// Floating-point tensors: f32, or bf16 / f16 under mixed precision (the op
// contract checks that an op's float operands agree).
def Graph_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
// fp32 only: master weights, optimizer states and their gradients.
def Graph_F32Tensor : StaticShapeTensorOf<[F32]>;
def Graph_IndexTensor : StaticShapeTensorOf<[I32]>;
// A rank-0 f32 operand; buildable so that formats need not spell its type.
def Graph_ScalarTensor : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;
// A rank-0 f32 result: inferred by the op, not by the format.
def Graph_ScalarResult : 0DTensorOf<[F32]>;

// Result types from the op's row of the plan op table
// (trellis/Common/OpContract.h), which is also its verifier: a malformed op
// fails to infer with the row's diagnostic, the same text the runtime gives
// for a malformed plan instruction.
def Graph_InferTypeFromContractTrait : NativeOpTrait<"InferTypeFromContract",
    [], [{
    static ::llvm::LogicalResult
    inferReturnTypes(::mlir::MLIRContext *context,
                     std::optional<::mlir::Location> location,
                     Adaptor adaptor,
                     ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes);
  }], [{
    ::llvm::LogicalResult
    $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location,
        ::mlir::ValueRange operands, ::mlir::DictionaryAttr attributes,
        ::mlir::OpaqueProperties properties, ::mlir::RegionRange regions,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes) {
      $cppClass::Adaptor adaptor(operands, attributes, properties, regions);
      return $cppClass::inferReturnTypes(context, location, adaptor,
                                         inferredReturnTypes);
    }
    ::llvm::LogicalResult
    $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes) {
      return ::trellis::graph::inferFromContract(
          ::trellis::graph::planOpName(
              getOperationName().split('.').second),
          context, location, adaptor.getOperands(),
          ::trellis::graph::inherentAttributes<$cppClass>(context, adaptor),
          adaptor.getAttributes(), inferredReturnTypes);
    }
  }]> {
  let cppNamespace = "::trellis::graph";
}
def Graph_InferTypeFromContract : TraitList<[
  DeclareOpInterfaceMethods<InferTypeOpInterface>,
  Graph_InferTypeFromContractTrait
]>;

// Every graph op: pure, and a plan op whose row in the op table gives its
// result types, sharding rule, cost and precision policy (the interfaces'
// default methods read the row). Its gradient is code (GraphGradients.cpp).
// `shardingMethods` lists the optional ShardingRuleOpInterface methods the
// op overrides (["localizeAttributes"] for ops whose attributes encode
// global sizes).
class Graph_Op<string mnemonic, list<Trait> traits = [],
               list<string> shardingMethods = []>
    : Op<Graph_Dialect, mnemonic, !listconcat(traits, [Pure,
        Graph_InferTypeFromContract,
        DeclareOpInterfaceMethods<Graph_ShardingRuleOpInterface,
                                  shardingMethods>,
        DeclareOpInterfaceMethods<Graph_GradientOpInterface>,
        Graph_CostOpInterface,
        Graph_PrecisionOpInterface])>;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Graph_FillOp : Graph_Op<"fill", [], ["localizeAttributes"]> {
  let summary = "A tensor with every element equal to `value`";
  let arguments = (ins DenseI64ArrayAttr:$shape, F64Attr:$value);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$value `shape` $shape attr-dict";
}

def Graph_ConstantOp : Graph_Op<"constant"> {
  let summary = "A small tensor of given values";
  let description = [{
    The tensor of `shape` holding `values` in row-major order (at most 512
    of them: per-head vectors such as ALiBi's slopes; larger constants are
    parameters or states). Never split: a consumer that wants a piece gets
    its slice.
  }];
  let arguments = (ins DenseI64ArrayAttr:$shape, DenseF64ArrayAttr:$values);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$values `shape` $shape attr-dict";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Graph_BinaryOp<string mnemonic> : Graph_Op<mnemonic> {
  let summary = "Elementwise `" # mnemonic # "` with NumPy broadcasting";
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Graph_AddOp : Graph_BinaryOp<"add">;
def Graph_SubOp : Graph_BinaryOp<"sub">;
def Graph_MulOp : Graph_BinaryOp<"mul">;
def Graph_DivOp : Graph_BinaryOp<"div">;
def Graph_MaximumOp : Graph_BinaryOp<"maximum">;
def Graph_EqualMaskOp : Graph_BinaryOp<"equal_mask"> {
  let summary = "1.0 where the broadcast operands are equal, else 0.0";
}

def Graph_ScaleOp : Graph_Op<"scale"> {
  let summary = "Multiplies every element by a constant";
  let arguments = (ins Graph_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `by` $factor attr-dict `:` type($input)";
}

def Graph_CastOp : Graph_Op<"cast"> {
  let summary = "Converts a float tensor to another float element type";
  let description = [{
    ```mlir
    %low = graph.cast %w to "bf16" : tensor<64x64xf32>
    ```
    To 16 bits rounds to nearest, ties to even; to f32 is exact. `to` is
    `f32`, `bf16` or `f16`.
  }];
  let arguments = (ins Graph_FloatTensor:$input, StrAttr:$to);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `to` $to attr-dict `:` type($input)";
}

def Graph_MicrobatchSumOp : Graph_Op<"microbatch_sum"> {
  let summary = "The sum of a micro-batch's value over the step's micro-batches";
  let description = [{
    ```mlir
    %total = graph.microbatch_sum %gradient : tensor<64x64xf32>
    ```
    The boundary between the ops of a micro-batch (those marked with
    `graph.phase`), which run once per micro-batch, and the ops of the whole
    step, which run once after them: `%gradient` is made by every
    micro-batch, `%total` is their sum, in micro-batch order (each
    micro-batch's value is added to the running total when it is made). The
    only way a value of a micro-batch reaches the step (gradients and the
    loss). With one micro-batch it is the identity. Linear: partial values
    pass through (a data-parallel gradient is reduced once per step, after
    the sum).
  }];
  let arguments = (ins Graph_FloatTensor:$input);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class Graph_UnaryOp<string mnemonic, string function>
    : Graph_Op<mnemonic> {
  let summary = "Elementwise `" # mnemonic # "`";
  let arguments = (ins Graph_FloatTensor:$input);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDeclaration = [{
    static UnaryFunction getFunction() { return UnaryFunction::}] # function # [{; }
  }];
  // The gradient of every unary op: f'(input) * dy, by the unary_grad of
  // its function.
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::buildGradients(
        ::mlir::OpBuilder &builder,
        ::llvm::ArrayRef<::mlir::Value> resultGradients,
        ::llvm::SmallVectorImpl<::mlir::Value> &operandGradients) {
      operandGradients.push_back(UnaryGradOp::create(
          builder, getLoc(), getInput(), resultGradients[0], getFunction()));
      return ::mlir::success();
    }
  }];
}

def Graph_NegOp : Graph_UnaryOp<"neg", "Neg">;
def Graph_ExpOp : Graph_UnaryOp<"exp", "Exp">;
def Graph_LogOp : Graph_UnaryOp<"log", "Log">;
def Graph_TanhOp : Graph_UnaryOp<"tanh", "Tanh">;
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", "Sqrt">;
def Graph_RsqrtOp : Graph_UnaryOp<"rsqrt", "Rsqrt">;
def Graph_SigmoidOp : Graph_UnaryOp<"sigmoid", "Sigmoid">;
def Graph_SiluOp : Graph_UnaryOp<"silu", "Silu">;
def Graph_GeluOp : Graph_UnaryOp<"gelu", "Gelu"> {
  let summary = "Exact GELU: x * Phi(x)";
}
def Graph_GeluTanhOp : Graph_UnaryOp<"gelu_tanh", "GeluTanh"> {
  let summary = "GELU with the tanh approximation (GPT-2's `gelu_new`)";
}
def Graph_ReluOp : Graph_UnaryOp<"relu", "Relu">;
def Graph_SoftplusOp : Graph_UnaryOp<"softplus", "Softplus">;
def Graph_AbsOp : Graph_UnaryOp<"abs", "Abs">;

def Graph_UnaryGradOp : Graph_Op<"unary_grad", [
    AllTypesMatch<["input", "result_grad"]>]> {
  let summary = "Gradient of a unary op: f'(input) * result_grad";
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$result_grad,
                       Graph_UnaryFunction:$function);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $function $input `,` $result_grad attr-dict `:` type($input)
  }];
}

def Graph_FusedElementwiseOp : Graph_Op<"fused_elementwise"> {
  let summary = "A chain or tree of elementwise ops evaluated in one pass";
  let description = [{
    ```mlir
    %y = graph.fused_elementwise %x, %bias ["add %0 %1", "gelu_tanh %2"]
        : (tensor<8x256xf32>, tensor<256xf32>) -> tensor<8x256xf32>
    ```
    Made by -trellis-fuse-elementwise. Slots %0 ... %n-1 are the inputs,
    broadcast to the result's shape (NumPy rules); each instruction of
    `program` appends a slot; the last is the result. The instructions and
    their dtype rules are those of trellis/Common/FusedProgram.h: each slot
    is rounded to the dtype its op would give unfused, so the op computes
    exactly what its members compute one by one, without their
    intermediate tensors.
  }];
  let arguments = (ins Variadic<Graph_FloatTensor>:$inputs,
                       StrArrayAttr:$program);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $inputs $program attr-dict `:` functional-type($inputs, $result)
  }];
}

//===----------------------------------------------------------------------===//
// Reductions and broadcasting
//===----------------------------------------------------------------------===//

class Graph_ReduceOp<string mnemonic> : Graph_Op<mnemonic> {
  let summary = "Reduces (`" # mnemonic # "`) over `dims`";
  let description = [{
    `dims` are distinct and sorted; with `keep_dims` they stay with size 1,
    otherwise they are dropped.
  }];
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keep_dims);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `dims` $dims (`keep_dims` $keep_dims^)? attr-dict `:` type($input)
  }];
}

def Graph_ReduceSumOp : Graph_ReduceOp<"reduce_sum">;
def Graph_ReduceMeanOp : Graph_ReduceOp<"reduce_mean">;
def Graph_ReduceMaxOp : Graph_ReduceOp<"reduce_max">;

def Graph_BroadcastToOp : Graph_Op<"broadcast_to", [], ["localizeAttributes"]> {
  let summary = "Broadcasts to `shape` with NumPy rules";
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `to` $shape attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

def Graph_ReshapeOp : Graph_Op<"reshape", [], ["localizeAttributes"]> {
  let summary = "Same elements in row-major order, another shape";
  let arguments = (ins AnyStaticShapeTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "$input `to` $shape attr-dict `:` type($input)";
}

def Graph_TransposeOp : Graph_Op<"transpose"> {
  let summary = "Permutes dimensions: result dim i is input dim perm[i]";
  let arguments = (ins Graph_FloatTensor:$input,
                       DenseI64ArrayAttr:$permutation);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `perm` $permutation attr-dict `:` type($input)";
}

def Graph_SliceOp : Graph_Op<"slice", [], ["localizeAttributes"]> {
  let summary = "The box [offsets, offsets + sizes) of the input";
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `offsets` $offsets `sizes` $sizes attr-dict `:` type($input)
  }];
}

def Graph_PadOp : Graph_Op<"pad"> {
  let summary = "Surrounds the input with zeros: `low` before, `high` after";
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$low,
                       DenseI64ArrayAttr:$high);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `low` $low `high` $high attr-dict `:` type($input)";
}

def Graph_ConcatOp : Graph_Op<"concat"> {
  let summary = "Concatenates along `dim`";
  let arguments = (ins Variadic<Graph_FloatTensor>:$inputs, I64Attr:$dim);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$inputs `dim` $dim attr-dict `:` type($inputs)";
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Graph_MatmulOp : Graph_Op<"matmul"> {
  let summary = "Batched matrix product";
  let description = [{
    `lhs` is [batch..., M, K] ([batch..., K, M] with `transpose_lhs`), `rhs`
    is [batch..., K, N] ([..., N, K] with `transpose_rhs`) with the same
    batch dimensions, or a 2-D matrix shared by every batch element. The
    result is [batch..., M, N], of the operands' float type, or f32 with
    `f32_result`: the fp32 sums unrounded (a 16-bit weight gradient's
    product written as its f32 gradient, by
    -trellis-fuse-gradient-accumulation; it has no gradient itself).
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs,
                       UnitAttr:$f32_result);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs (`transposed` $transpose_lhs^)? `,` $rhs (`transposed` $transpose_rhs^)?
    (`into` `f32` $f32_result^)? attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

def Graph_MatmulAccumulateOp : Graph_Op<"matmul_accumulate"> {
  let summary = "A matrix product summed over the step's micro-batches, in f32";
  let description = [{
    ```mlir
    %total = graph.matmul_accumulate %x transposed, %dy
        {graph.phase = "weight"} : tensor<32x64xbf16>, tensor<32x256xbf16>
    ```
    `graph.microbatch_sum` of a `graph.matmul` (through a cast to f32 when
    the operands are 16-bit) in one op, as Megatron's gradient-accumulation
    fusion: each micro-batch's product, computed in fp32, is added into the
    f32 total as it is made, never rounded to the operands' type and never
    stored on its own. Operands and layout as `graph.matmul`. It runs with
    the micro-batch's ops (it carries their `graph.phase`); its result is a
    value of the step, as a `graph.microbatch_sum`'s is. Partial values
    pass through (a data-parallel gradient is reduced once per step, after
    the sum). -trellis-fuse-gradient-accumulation makes it.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Graph_F32Tensor:$result);
  let assemblyFormat = [{
    $lhs (`transposed` $transpose_lhs^)? `,` $rhs (`transposed` $transpose_rhs^)?
    attr-dict `:` type($lhs) `,` type($rhs)
  }];
}

//===----------------------------------------------------------------------===//
// Neural-network layers
//===----------------------------------------------------------------------===//

def Graph_SoftmaxOp : Graph_Op<"softmax"> {
  let summary = "Softmax over the last dimension";
  let arguments = (ins Graph_FloatTensor:$input);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Graph_SoftmaxGradOp : Graph_Op<"softmax_grad", [
    AllTypesMatch<["result_value", "result_grad"]>]> {
  let summary = "Input gradient of softmax from its result and result gradient";
  let arguments = (ins Graph_FloatTensor:$result_value,
                       Graph_FloatTensor:$result_grad);
  let results = (outs Graph_FloatTensor:$input_grad);
  let assemblyFormat = "$result_value `,` $result_grad attr-dict `:` type($result_value)";
}

def Graph_LayerNormOp : Graph_Op<"layer_norm", [
    AllTypesMatch<["weight", "bias"]>]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    (x - mean) / sqrt(var + epsilon) * weight + bias, with the biased
    variance; weight and bias have the size of the last dimension.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       Graph_FloatTensor:$bias, F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias `eps` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
}

def Graph_LayerNormGradOp : Graph_Op<"layer_norm_grad", [
    AllTypesMatch<["input", "result_grad"]>]> {
  let summary = "Gradients of layer_norm for its input, weight and bias";
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       Graph_FloatTensor:$result_grad, F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$input_grad,
                      Graph_FloatTensor:$weight_grad,
                      Graph_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $result_grad `eps` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
}

def Graph_RmsNormOp : Graph_Op<"rms_norm"> {
  let summary = "RMS normalization over the last dimension";
  let description = [{ x / sqrt(mean(x^2) + epsilon) * weight. }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `eps` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
}

def Graph_RmsNormGradOp : Graph_Op<"rms_norm_grad", [
    AllTypesMatch<["input", "result_grad"]>]> {
  let summary = "Gradients of rms_norm for its input and weight";
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       Graph_FloatTensor:$result_grad, F64Attr:$epsilon);
  let results = (outs Graph_FloatTensor:$input_grad,
                      Graph_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $result_grad `eps` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
}

def Graph_EmbeddingOp : Graph_Op<"embedding", [], ["localizeAttributes"]> {
  let summary = "Rows of `table` [V, E] selected by `ids`";
  let description = [{
    The result has shape ids.shape + [E]. Row `id - offset` is taken when it
    lies in [0, V); other ids give a zero vector. A vocabulary shard holds
    rows [offset, offset + V) of the full table, where offset =
    `vocab_offset` + (the rank's position along the mesh `axes`) * V: the
    partitioner sets `axes` when it splits the vocabulary. `padding_idx`
    (PyTorch's, a Hugging Face config's pad_token_id) is a row of the full
    table that the gradient leaves alone: its lookups give the row, and
    embedding_grad adds nothing for them.
  }];
  let arguments = (ins Graph_FloatTensor:$table, Graph_IndexTensor:$ids,
                       DefaultValuedAttr<I64Attr, "0">:$vocab_offset,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` type($table) `,` type($ids)";
}

def Graph_EmbeddingGradOp : Graph_Op<"embedding_grad", [], ["localizeAttributes"]> {
  let summary = "Gradient of embedding for its table: rows scatter-added";
  let description = [{
    Tokens whose id is `padding_idx` (a row of the full table) add nothing:
    that row's gradient is zero, as PyTorch's.
  }];
  let arguments = (ins Graph_IndexTensor:$ids, Graph_FloatTensor:$result_grad,
                       I64Attr:$num_embeddings,
                       DefaultValuedAttr<I64Attr, "0">:$vocab_offset,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Graph_FloatTensor:$table_grad);
  let assemblyFormat = [{
    $ids `,` $result_grad `rows` $num_embeddings attr-dict `:` type($ids) `,` type($result_grad)
  }];
}

def Graph_RopeOp : Graph_Op<"rope", [], ["localizeAttributes"]> {
  let summary = "Rotary position embedding on [batch, seq, heads, dim]";
  let description = [{
    Rotates the pair (i, i + dim/2) of every head vector at position s by the
    angle s * frequencies[i] (the Hugging Face "rotate half" convention), or
    with `interleaved` the pair (2i, 2i + 1) (GPT-J's "rotate every two",
    GLM's, Cohere's, DeepSeek's `rope_interleave`).
    `frequencies` has dim/2 entries: theta^(-2i/dim), possibly rescaled (as
    Llama 3's `rope_scaling` does). With `inverse` the rotation is undone:
    that is the gradient. With the sequence split over the mesh `axes`
    (the partitioner sets them), position s of this rank's piece is
    (the rank's position along `axes`) * S + s. With `chunks`, the sequence
    is stored in zigzag order of that many chunks (ring attention's causal
    balance, trellis/Common/SequenceChunks.h): stored index i is at the
    position that order gives it.
  }];
  let arguments = (ins Graph_FloatTensor:$input,
                       DenseF64ArrayAttr:$frequencies,
                       DefaultValuedAttr<BoolAttr, "false">:$inverse,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<I64Attr>:$chunks,
                       UnitAttr:$interleaved);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `frequencies` $frequencies attr-dict `:` type($input)";
}

def Graph_AttentionOp : Graph_Op<"attention", [
    AllTypesMatch<["key", "value"]>, AttrSizedOperandSegments],
    ["localizeAttributes"]> {
  let summary = "Scaled dot-product attention, multi-head or grouped-query";
  let description = [{
    `query` is [B, Sq, Hq, D]; `key` and `value` are [B, S, Hkv, D] with Hkv
    dividing Hq: query head h reads key/value head h / (Hq / Hkv). The result
    is [B, Sq, Hq, D]: softmax(q k^T * scale [+ causal mask]) v per head.
    Sq is S unless the queries' sequence is split over the mesh `axes` (the
    partitioner sets them; context parallelism): query i of this rank's
    piece is then at position (the rank's position along `axes`) * Sq + i,
    and sees the keys up to it. With `chunks`, queries and keys are stored
    in zigzag order (see rope): the causal mask compares the positions
    that order gives them. With `window` W (causal only), query position p
    sees the keys at positions p - W + 1 ... p (a sliding window: Mistral,
    Gemma 2). With `softcap` c, each score s = q k^T * scale becomes
    c * tanh(s / c) before the mask and softmax (Gemma 2's soft-capping).
    With `slopes` [Hq] (ALiBi: BLOOM, MPT), head h's score of the key at
    position pk for the query at position pq gains slopes[h] * (pk - pq).
    With `sinks` [Hq] (attention sinks: GPT-OSS), head h's softmax has one
    more logit, sinks[h], in its denominator and no value: each row's
    weights sum to less than one. Both have the query's element type.
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value,
                       Optional<Graph_FloatTensor>:$slopes,
                       Optional<Graph_FloatTensor>:$sinks, F64Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<F64Attr>:$softcap);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`slopes` $slopes^ `:` type($slopes))? (`sinks` $sinks^ `:` type($sinks))? `scale` $scale attr-dict `:` type($query) `,` type($key)
  }];
}

def Graph_AttentionGradOp : Graph_Op<"attention_grad", [
    AllTypesMatch<["key", "value"]>, AllTypesMatch<["query", "result_grad"]>,
    AttrSizedOperandSegments], ["localizeAttributes"]> {
  let summary = "Gradients of attention for query, key, value (and sinks)";
  let description = [{
    Recomputes the attention probabilities from query and key. With
    `sinks`, the fourth result is their gradient; the ALiBi `slopes` are
    constants and get none.
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Graph_FloatTensor:$result_grad,
                       Optional<Graph_FloatTensor>:$slopes,
                       Optional<Graph_FloatTensor>:$sinks,
                       F64Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<F64Attr>:$softcap);
  let results = (outs Graph_FloatTensor:$query_grad,
                      Graph_FloatTensor:$key_grad,
                      Graph_FloatTensor:$value_grad,
                      Optional<Graph_FloatTensor>:$sinks_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $result_grad (`slopes` $slopes^ `:` type($slopes))? (`sinks` $sinks^ `:` type($sinks))? `scale` $scale attr-dict `:` type($query) `,` type($key)
  }];
}

def Graph_AttentionBlockOp : Graph_Op<"attention_block", [
    AllTypesMatch<["key", "value"]>, AttrSizedOperandSegments]> {
  let summary = "Ring attention: the queries' block against one key block";
  let description = [{
    One step of ring attention (Liu et al., 2023). `query` is this rank's
    block [B, S, Hq, D] of a sequence split over the mesh `axes` (N ranks);
    `key` and `value` [B, S, Hkv, D] are the block of the rank `shift`
    places before it along `axes`, passed around the ring. The results are
    softmax(q k^T * scale [+ causal mask]) v over that block alone and the
    rows' log-sum-exp [B, Hq, S] (f32; -inf and a zero row where the mask
    hides the whole block): attention_merge combines blocks exactly. With
    `chunks`, the sequence is stored in zigzag order (see rope), and the
    causal mask compares the positions that order gives; `window`,
    `softcap` and `slopes` as in attention (ALiBi's positions are the
    blocks' places in the whole sequence). `sinks` join the softmax of the
    block they are given to (the ring gives them to one block: shift 0).
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value,
                       Optional<Graph_FloatTensor>:$slopes,
                       Optional<Graph_FloatTensor>:$sinks, F64Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<StrArrayAttr>:$axes, I64Attr:$shift,
                       OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<F64Attr>:$softcap);
  let results = (outs Graph_FloatTensor:$result, Graph_F32Tensor:$log_sum_exp);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`slopes` $slopes^ `:` type($slopes))? (`sinks` $sinks^ `:` type($sinks))? `scale` $scale `shift` $shift attr-dict `:` type($query) `,` type($key)
  }];
}

def Graph_AttentionMergeOp : Graph_Op<"attention_merge", [
    AllTypesMatch<["result", "other"]>,
    AllTypesMatch<["log_sum_exp", "other_log_sum_exp"]>]> {
  let summary = "Combines two attention blocks by their log-sum-exp";
  let description = [{
    With l = logaddexp(log_sum_exp, other_log_sum_exp), the result is
    result * exp(log_sum_exp - l) + other * exp(other_log_sum_exp - l),
    per row, and l: the attention over both blocks' keys (online softmax).
  }];
  let arguments = (ins Graph_FloatTensor:$result, Graph_F32Tensor:$log_sum_exp,
                       Graph_FloatTensor:$other,
                       Graph_F32Tensor:$other_log_sum_exp);
  let results = (outs Graph_FloatTensor:$merged,
                      Graph_F32Tensor:$merged_log_sum_exp);
  let assemblyFormat = [{
    $result `,` $log_sum_exp `,` $other `,` $other_log_sum_exp attr-dict `:` type($result) `,` type($log_sum_exp)
  }];
}

def Graph_AttentionBlockGradOp : Graph_Op<"attention_block_grad", [
    AllTypesMatch<["key", "value"]>,
    AllTypesMatch<["query", "result", "result_grad"]>,
    AttrSizedOperandSegments]> {
  let summary = "Ring attention's backward step for one key block";
  let description = [{
    The block's share of attention's gradients (FlashAttention-2's
    backward): `result` and `log_sum_exp` are the whole attention's (over
    every block), from which the block's probabilities are recomputed.
    Returns this block's contribution to the query gradient and the key
    block's and value block's gradients from these queries; the ring sums
    them. With `sinks` (the block that had them in the forward), the
    fourth result is their whole gradient. Operands and attributes as in
    attention_block.
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Graph_FloatTensor:$result,
                       Graph_F32Tensor:$log_sum_exp,
                       Graph_FloatTensor:$result_grad,
                       Optional<Graph_FloatTensor>:$slopes,
                       Optional<Graph_FloatTensor>:$sinks, F64Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       OptionalAttr<StrArrayAttr>:$axes, I64Attr:$shift,
                       OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<F64Attr>:$softcap);
  let results = (outs Graph_FloatTensor:$query_grad,
                      Graph_FloatTensor:$key_grad,
                      Graph_FloatTensor:$value_grad,
                      Optional<Graph_FloatTensor>:$sinks_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $result `,` $log_sum_exp `,` $result_grad (`slopes` $slopes^ `:` type($slopes))? (`sinks` $sinks^ `:` type($sinks))? `scale` $scale `shift` $shift attr-dict `:` type($query) `,` type($key) `,` type($log_sum_exp)
  }];
}

def Graph_PositionsOp : Graph_Op<"positions", [], ["localizeAttributes"]> {
  let summary = "The positions 0 ... length - 1 of a sequence, as ids";
  let description = [{
    Learned position embeddings read their table at these ids. With
    `chunks`, the sequence is stored in zigzag order (see rope) and each
    stored index holds the position that order gives it; split over the
    mesh `axes` (the partitioner sets them), the rank's piece starts at its
    place.
  }];
  let arguments = (ins I64Attr:$length, OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<StrArrayAttr>:$axes);
  let results = (outs Graph_IndexTensor:$result);
  let assemblyFormat = "$length attr-dict";
}

def Graph_CrossEntropyOp : Graph_Op<"cross_entropy", [],
    ["localizeAttributes"]> {
  let summary = "Mean cross-entropy of logits [..., V] against target ids";
  let description = [{
    Returns sum over target positions of logsumexp(logits) - logits[target],
    divided by `normalizer` (0: the number of target positions, i.e. the
    mean). A partitioned program keeps the global count as normalizer, so
    that local results are partial sums. With `axes`, the class dimension
    is split over those mesh axes (the rank holds classes [position * V,
    (position + 1) * V)): the op combines maxima, sums and target logits
    over them itself, never gathering the logits. Targets outside the
    vocabulary are an error at run time.
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$targets,
                       DefaultValuedAttr<I64Attr, "0">:$normalizer,
                       OptionalAttr<StrArrayAttr>:$axes);
  let results = (outs Graph_ScalarResult:$loss);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` type($logits) `,` type($targets)";
}

def Graph_CrossEntropyGradOp : Graph_Op<"cross_entropy_grad", [],
    ["localizeAttributes"]> {
  let summary = "Gradient of cross_entropy for its logits";
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$targets,
                       Graph_ScalarTensor:$loss_grad,
                       DefaultValuedAttr<I64Attr, "0">:$normalizer,
                       OptionalAttr<StrArrayAttr>:$axes);
  let results = (outs Graph_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $targets `,` $loss_grad attr-dict `:` type($logits) `,` type($targets)
  }];
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

def Graph_MoeRouteOp : Graph_Op<"moe_route"> {
  let summary = "Each token's top_k experts and their weights";
  let description = [{
    ```mlir
    %weights, %experts = graph.moe_route %logits top_k 2 {normalize}
        : tensor<2x8x4xf32>
    ```
    Scores from `logits` [..., E]: softmax over the experts (`scoring`
    "softmax", the default) or each logit's sigmoid ("sigmoid"). The
    `top_k` highest scores, in descending order, ties to the lower expert
    index, give `experts` [..., top_k] (i32) and their scores `weights`
    [..., top_k] (f32), renormalized to sum to one with `normalize`, times
    `scaling` when given. fp32 inside whatever the logits' dtype.

    DeepSeek-V3's router adds two things. A `bias` [E] (f32; its
    e_score_correction_bias) shifts the scores for the choice alone: the
    experts are the top_k of score + bias, their weights still the scores.
    With `groups` G and `top_groups` g, the E experts form G contiguous
    groups, each ranked by the sum of its `group_top` (2, the default, or
    1: DeepSeek-V2's group-limited greedy) highest score + bias; the
    choice ranks only the experts of the g best groups (ties to the lower
    group).
    ```mlir
    %w, %e = graph.moe_route %logits bias %b top_k 8
        {scoring = "sigmoid", normalize, scaling = 2.5 : f64, groups = 8,
         top_groups = 4} : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$logits,
                       Optional<Graph_F32Tensor>:$bias, I64Attr:$top_k,
                       OptionalAttr<StrAttr>:$scoring, UnitAttr:$normalize,
                       OptionalAttr<F64Attr>:$scaling,
                       OptionalAttr<I64Attr>:$groups,
                       OptionalAttr<I64Attr>:$top_groups,
                       OptionalAttr<I64Attr>:$group_top);
  let results = (outs Graph_F32Tensor:$weights, Graph_IndexTensor:$experts);
  let assemblyFormat = [{
    $logits (`bias` $bias^)? `top_k` $top_k attr-dict `:` type($logits) (`,` type($bias)^)?
  }];
}

def Graph_MoeRouteGradOp : Graph_Op<"moe_route_grad"> {
  let summary = "Gradient of moe_route for its logits";
  let description = [{
    From the gradient of the weights, with the experts the forward op chose.
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$experts,
                       Graph_F32Tensor:$weights_grad, I64Attr:$top_k,
                       OptionalAttr<StrAttr>:$scoring, UnitAttr:$normalize,
                       OptionalAttr<F64Attr>:$scaling);
  let results = (outs Graph_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $experts `,` $weights_grad `top_k` $top_k attr-dict `:` type($logits) `,` type($experts) `,` type($weights_grad)
  }];
}

def Graph_ExpertMatmulOp : Graph_Op<"expert_matmul", [],
    ["localizeAttributes"]> {
  let summary = "Each slot's row times the matrix of the expert it chose";
  let description = [{
    ```mlir
    %h = graph.expert_matmul %x, %w transposed, %experts
        : tensor<2x8x16xf32>, tensor<4x32x16xf32>, tensor<2x8x2xi32>
    ```
    `experts` [..., k] names each token's k experts (slots). `lhs` is
    [..., K], one row per token that each of its slots uses, or [..., k, K],
    one row per slot; `weight` is [E, K, N] ([E, N, K] with
    `transpose_rhs`). The result [..., k, N] holds row (t, j) times
    weight[experts[t, j]]. An expert id outside [0, E) is an error when the
    kernel runs. Under expert parallelism (`axes`, set by
    -trellis-apply-expert-parallel), `weight` holds experts [p E, (p + 1) E)
    of the E x (group size) the ids name, p the rank's place along `axes`;
    slots routed to other experts give zeros. With `dispatch =
    "all_to_all"` (set by -trellis-lower-expert-all-to-all) `lhs`,
    `experts` and the result are this rank's own slots: the kernel sends
    each slot's row to the rank that holds its expert (counts first, then
    the rows) and receives the products back.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$weight,
                       Graph_IndexTensor:$experts, UnitAttr:$transpose_rhs,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<StrAttr>:$dispatch);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $weight (`transposed` $transpose_rhs^)? `,` $experts attr-dict `:` type($lhs) `,` type($weight) `,` type($experts)
  }];
}

def Graph_ExpertMatmulWeightGradOp : Graph_Op<"expert_matmul_weight_grad", [],
    ["localizeAttributes"]> {
  let summary = "Gradient of expert_matmul for its weight";
  let description = [{
    For each of the `num_experts` experts, the sum over the slots that chose
    it, in token order, of lhs row times result_grad row; zeros for an
    expert no slot chose. In the weight's layout (`transpose_rhs`). With
    `axes`, `num_experts` is the rank's range of experts, as expert_matmul
    holds them; with `dispatch = "all_to_all"` the operands are this
    rank's own slots, whose rows the kernel sends to the ranks holding
    their experts.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$result_grad,
                       Graph_IndexTensor:$experts, I64Attr:$num_experts,
                       UnitAttr:$transpose_rhs,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<StrAttr>:$dispatch);
  let results = (outs Graph_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $lhs `,` $result_grad `,` $experts `experts` $num_experts attr-dict `:` type($lhs) `,` type($result_grad) `,` type($experts)
  }];
}

def Graph_ExpertCountsOp : Graph_Op<"expert_counts"> {
  let summary = "How many slots chose each expert";
  let description = [{
    [num_experts] f32 from `experts` [..., k]: the load-balancing loss's
    token fractions and the step's routing statistics.
  }];
  let arguments = (ins Graph_IndexTensor:$experts, I64Attr:$num_experts);
  let results = (outs Graph_F32Tensor:$result);
  let assemblyFormat = "$experts `experts` $num_experts attr-dict `:` type($experts)";
}

def Graph_ExpertBiasUpdateOp : Graph_Op<"expert_bias_update"> {
  let summary = "A router's score bias moved towards the mean load";
  let description = [{
    ```mlir
    %new = graph.expert_bias_update %bias, %counts rate 1.0e-3
        : tensor<8xf32>, tensor<8xf32>
    ```
    DeepSeek-V3's auxiliary-loss-free balancing: `bias` [E] (a moe_route's
    score bias) plus `rate` times the sign of (the mean of `counts` minus
    each expert's count), `counts` [E] the step's slots per expert. Experts
    that took fewer than the mean gain, those that took more lose.
  }];
  let arguments = (ins Graph_F32Tensor:$bias, Graph_F32Tensor:$counts,
                       F64Attr:$rate);
  let results = (outs Graph_F32Tensor:$result);
  let assemblyFormat = [{
    $bias `,` $counts `rate` $rate attr-dict `:` type($bias) `,` type($counts)
  }];
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

def Graph_AdamWOp : Graph_Op<"adamw", [
    AllTypesMatch<["param", "grad", "first_moment", "second_moment"]>]> {
  let summary = "One AdamW step (decoupled weight decay)";
  let description = [{
    With t = step (counted from 1):
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    p = p - lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p).
    Returns the new parameter and moments. With `lr_schedule` (constant,
    linear, cosine, wsd), lr is the schedule's rate at step t, peaking at
    `learning_rate` (`warmup_steps`, `decay_steps`, `wsd_decay_steps`,
    `min_lr`: trellis/Common/LearningRate.h has the formulas).
    With a `grad_scale` scalar s, g is `grad` times 1 / s in double (a
    loss-scaled step's unscale, exact for the powers of two a loss scale
    takes), and when s is not finite the results
    equal the operands: a step whose gradients overflowed changes nothing,
    and may still run in the operands' memory.
    ```mlir
    %p1, %m1, %v1 = graph.adamw %p, %g, %m, %v, %step grad_scale %s
        {...} : tensor<4x3xf32>
    ```
  }];
  let arguments = (ins Graph_F32Tensor:$param, Graph_F32Tensor:$grad,
                       Graph_F32Tensor:$first_moment,
                       Graph_F32Tensor:$second_moment,
                       Graph_ScalarTensor:$step,
                       Optional<Graph_ScalarTensor>:$grad_scale,
                       F64Attr:$learning_rate, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$epsilon, F64Attr:$weight_decay,
                       OptionalAttr<StrAttr>:$lr_schedule,
                       OptionalAttr<I64Attr>:$warmup_steps,
                       OptionalAttr<I64Attr>:$decay_steps,
                       OptionalAttr<I64Attr>:$wsd_decay_steps,
                       OptionalAttr<F64Attr>:$min_lr);
  let results = (outs Graph_F32Tensor:$new_param,
                      Graph_F32Tensor:$new_first_moment,
                      Graph_F32Tensor:$new_second_moment);
  let assemblyFormat = [{
    $param `,` $grad `,` $first_moment `,` $second_moment `,` $step (`grad_scale` $grad_scale^)? attr-dict `:` type($param)
  }];
}

def Graph_SgdOp : Graph_Op<"sgd", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "One SGD step with weight decay: p = p - lr (g + wd p)";
  let description = [{
    With a `grad_scale` scalar s, g is `grad` / s, and when s is not finite
    the result equals `param` (as adamw's).
  }];
  let arguments = (ins Graph_F32Tensor:$param, Graph_F32Tensor:$grad,
                       Optional<Graph_ScalarTensor>:$grad_scale,
                       F64Attr:$learning_rate, F64Attr:$weight_decay);
  let results = (outs Graph_F32Tensor:$new_param);
  let assemblyFormat = "$param `,` $grad (`grad_scale` $grad_scale^)? attr-dict `:` type($param)";
}

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHOPS_TD
