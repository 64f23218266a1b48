//===- TrellisOps.td - Operations of the trellis dialect ---*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_TD
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "trellis/Dialect/Trellis/IR/TrellisDialect.td"
include "trellis/Dialect/Trellis/IR/TrellisAttrs.td"

class Trellis_Op<string mnemonic, list<Trait> traits = []>
    : Op<Trellis_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Mesh and sharding annotation
//===----------------------------------------------------------------------===//

def Trellis_MeshOp : Trellis_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "Declares a device mesh as a symbol";
  let description = [{
    ```mlir
    trellis.mesh @mesh = <["dp"=2, "pp"=2, "tp"=4]>
    ```
    Shardings and collectives refer to the mesh by its symbol name.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Trellis_MeshAttr:$mesh);
  let assemblyFormat = "$sym_name `=` $mesh attr-dict";
}

def Trellis_ShardOp : Trellis_Op<"shard", [Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Attaches a sharding to a value";
  let description = [{
    ```mlir
    %1 = trellis.shard %0 <@mesh, [{"dp"}, {} ]> : tensor<8x16xf32>
    ```
    The result is the operand laid out as the sharding says. Propagation
    treats it as a fixed point; the partitioner turns a change of layout into
    collectives.
  }];
  let arguments = (ins AnyRankedTensor:$input, Trellis_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input $sharding attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// A collective runs over the groups of ranks that differ only along `axes`.
// Its symbol-use verifier checks the mesh, the axes, and that the result
// shape follows from the operand shape and the group size.
class Trellis_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Trellis_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  code commonExtraClassDeclaration = [{
    /// The mesh axis names as strings.
    ::llvm::SmallVector<::llvm::StringRef> getAxisNames() {
      ::llvm::SmallVector<::llvm::StringRef> names;
      for (::mlir::Attribute axis : getAxes())
        names.push_back(::llvm::cast<::mlir::StringAttr>(axis).getValue());
      return names;
    }
  }];
  let extraClassDeclaration = commonExtraClassDeclaration;
}

def Trellis_AllReduceOp : Trellis_CollectiveOp<"all_reduce", [Pure,
    SameOperandsAndResultType]> {
  let summary = "Reduces a value over a group; every rank gets the result";
  let description = [{
    ```mlir
    %1 = trellis.all_reduce %0 over @mesh ["tp"] sum : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, Trellis_ReductionKindAttr:$kind);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat =
    "$input `over` $mesh $axes custom<ReductionKind>($kind) attr-dict `:` type($result)";
}

def Trellis_AllGatherOp : Trellis_CollectiveOp<"all_gather", [Pure]> {
  let summary = "Concatenates the group's values along a dimension";
  let description = [{
    ```mlir
    %1 = trellis.all_gather %0 over @mesh ["tp"] dim 1
        : tensor<8x4xf32> -> tensor<8x16xf32>
    ```
    Result dimension `dim` is the operand's times the group size, in group
    order.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
}

def Trellis_ReduceScatterOp : Trellis_CollectiveOp<"reduce_scatter", [Pure]> {
  let summary = "Reduces over a group and leaves each rank one slice";
  let description = [{
    ```mlir
    %1 = trellis.reduce_scatter %0 over @mesh ["dp"] dim 0 sum
        : tensor<8x16xf32> -> tensor<4x16xf32>
    ```
    Result dimension `dim` is the operand's divided by the group size; the
    rank at group position i keeps slice i of the reduced value.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim,
                       Trellis_ReductionKindAttr:$kind);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` $dim custom<ReductionKind>($kind) attr-dict `:` type($input) `->` type($result)
  }];
}

def Trellis_AllToAllOp : Trellis_CollectiveOp<"all_to_all", [Pure]> {
  let summary = "Splits along one dimension, exchanges, concatenates along another";
  let description = [{
    ```mlir
    %1 = trellis.all_to_all %0 over @mesh ["sp"] split 2 concat 1
        : tensor<2x16x8xf32> -> tensor<2x64x2xf32>
    ```
    Each rank cuts `split_dim` into group-size pieces, sends piece j to the
    rank at group position j, and concatenates what it receives along
    `concat_dim` in group order. When the two dimensions are equal the shape
    is unchanged.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `split` $split_dim `concat` $concat_dim attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Trellis_BroadcastOp : Trellis_CollectiveOp<"broadcast", [Pure,
    SameOperandsAndResultType]> {
  let summary = "Copies the value of one group member to the whole group";
  let description = [{
    ```mlir
    %1 = trellis.broadcast %0 over @mesh ["dp"] root 0 : tensor<16xf32>
    ```
    `root` is a position in the group, in [0, group size).
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$root);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat =
    "$input `over` $mesh $axes `root` $root attr-dict `:` type($result)";
}

def Trellis_CollectivePermuteOp : Trellis_CollectiveOp<"collective_permute", [
    Pure, SameOperandsAndResultType]> {
  let summary = "Shifts values cyclically around a group";
  let description = [{
    ```mlir
    %1 = trellis.collective_permute %0 over @mesh ["sp"] shift 1 : tensor<4x8xf32>
    ```
    The rank at group position i receives the value of position
    (i - shift) mod group size: with shift 1, every rank passes its value to
    the next one, as in ring attention.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$shift);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat =
    "$input `over` $mesh $axes `shift` $shift attr-dict `:` type($result)";
}

def Trellis_SliceShardOp : Trellis_CollectiveOp<"slice_shard", [Pure]> {
  let summary = "Keeps this rank's piece of a replicated value (no communication)";
  let description = [{
    ```mlir
    %1 = trellis.slice_shard %0 over @mesh ["tp"] dim 1
        : tensor<8x16xf32> -> tensor<8x4xf32>
    ```
    The rank at group position i keeps piece i of `dim`, cut into group-size
    equal pieces: the local step from a replicated to a split value.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Point to point
//===----------------------------------------------------------------------===//

def Trellis_SendOp : Trellis_CollectiveOp<"send"> {
  let summary = "Sends a value to one member of the rank's group";
  let description = [{
    ```mlir
    trellis.send %0 to @mesh ["pp"] peer 1 channel 3 : tensor<4x8xf32>
    ```
    `peer` is a position in the group along `axes` (for a pipeline, the
    stage); `channel` pairs the send with the `trellis.recv` that takes it.
    The peer must differ from the sender in the programs that run it.
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$peer, I64Attr:$channel);
  let assemblyFormat = [{
    $input `to` $mesh $axes `peer` $peer `channel` $channel attr-dict `:` type($input)
  }];
}

def Trellis_RecvOp : Trellis_CollectiveOp<"recv"> {
  let summary = "Receives a value from one member of the rank's group";
  let description = [{
    ```mlir
    %0 = trellis.recv from @mesh ["pp"] peer 0 channel 3 : tensor<4x8xf32>
    ```
    The type is the sent value's type: it is part of the contract with the
    matching `trellis.send`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$peer, I64Attr:$channel);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    `from` $mesh $axes `peer` $peer `channel` $channel attr-dict `:` type($result)
  }];
}

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISOPS_TD
