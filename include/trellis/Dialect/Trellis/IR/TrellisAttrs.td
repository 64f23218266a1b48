//===- TrellisAttrs.td - Attributes of the trellis dialect -*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_TD
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "trellis/Dialect/Trellis/IR/TrellisDialect.td"
include "trellis/Dialect/Trellis/IR/TrellisEnums.td"

class Trellis_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Trellis_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Trellis_MeshAxisAttr : Trellis_Attr<"MeshAxis", "mesh_axis"> {
  let summary = "A named mesh axis with a size and a role";
  let description = [{
    Printed `"tp"=4`, or `"rows":data=4` where the name does not imply the
    role (trellis/Common/Mesh.h: dp, dp_replicate, dp_shard, tp, pp, cp and
    ep imply theirs). Inside a `#trellis.mesh` only. Passes find axes by
    role (the batch's, the tensor-parallel one), never by name.
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        "int64_t":$size,
                        "::trellis::AxisRole":$role);
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$name, "int64_t":$size), [{
      return $_get($_ctxt, name, size, ::trellis::impliedAxisRole(name));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
}

def Trellis_MeshAttr : Trellis_Attr<"Mesh", "mesh"> {
  let summary = "Named axes with sizes, major to minor";
  let description = [{
    `#trellis.mesh<["dp"=2, "pp"=2, "tp"=4]>` has 16 ranks numbered
    rank = dp*8 + pp*4 + tp; `#trellis.mesh<["replica":data=2,
    "shard":data=4]>` names its roles. Verified: at least one axis, names
    unique and non-empty, sizes >= 1.
  }];
  let parameters = (ins ArrayRefParameter<"MeshAxisAttr", "axes">:$axes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The mesh as process-group arithmetic. Precondition: verified.
    ::trellis::Mesh getMesh() const;
    /// Index of the axis called `name`, or nullopt.
    std::optional<size_t> getAxisIndex(::llvm::StringRef name) const;
    /// Size of the axis called `name`, 1 if the mesh has none.
    int64_t getAxisSize(::llvm::StringRef name) const;
    /// The names of the axes with `role`, major to minor.
    ::llvm::SmallVector<::mlir::StringAttr>
    getAxesWithRole(::trellis::AxisRole role) const;
    /// The names of the axes the batch splits over (data and expert
    /// roles), major to minor.
    ::llvm::SmallVector<::mlir::StringAttr> getBatchAxes() const;
    /// The ranks of a group along `axes` (1 for none).
    int64_t getGroupSize(::llvm::ArrayRef<::mlir::StringAttr> axes) const;
    /// Number of ranks.
    int64_t getNumRanks() const;
  }];
}

def Trellis_DimShardingAttr : Trellis_Attr<"DimSharding", "dim_sharding"> {
  let summary = "The mesh axes one tensor dimension is split over";
  let description = [{
    `{"tp", "sp"}` splits the dimension over `tp` then `sp` (the first axis is
    the most significant: shard index = tp * size(sp) + sp). `{}` keeps it
    whole. A trailing `?` marks the dimension open: propagation may split it
    further; without it the dimension is closed.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr", "axes">:$axes,
                        "bool":$is_open);
  let hasCustomAssemblyFormat = 1;
}

def Trellis_ShardingAttr : Trellis_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is laid out over a mesh";
  let description = [{
    `#trellis.sharding<@mesh, [{"dp"}, {} ], partial<sum>={"tp"}>`: dimension 0
    split over `dp`, dimension 1 whole, and the value partial over `tp`: the
    true value is the sum of the `tp` ranks' values. Axes named nowhere
    replicate the value.

    Checked without the mesh: no axis appears twice (among all dimensions and
    partial axes). Checked against the mesh and the tensor where the sharding
    is used: the mesh exists, every axis is one of its axes, the number of
    dimensions equals the tensor's rank, and every dimension is divisible by
    the product of its axes' sizes.
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh_name,
    ArrayRefParameter<"DimShardingAttr", "dimensions">:$dims,
    ArrayRefParameter<"::mlir::StringAttr", "partial axes">:$partial_axes,
    "ReductionKind":$partial_kind);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::mlir::FlatSymbolRefAttr":$meshName,
                     "::llvm::ArrayRef<DimShardingAttr>":$dims), [{
      return $_get($_ctxt, meshName, dims, ::llvm::ArrayRef<::mlir::StringAttr>(),
                   ReductionKind::Sum);
    }]>
  ];
  let extraClassDeclaration = [{
    /// True when no dimension is split and nothing is partial.
    bool isFullyReplicated() const;
    /// True when `axis` splits some dimension or is partial.
    bool usesAxis(::llvm::StringRef axis) const;
    /// Checks this sharding against `mesh` and a value of type `type`:
    /// known axes, matching rank, and (unless `typeIsLocal`: the type is
    /// one rank's shard, as in a partitioned function, or `allowPadding`:
    /// a split that does not divide pads the last pieces) divisible
    /// dimensions.
    ::llvm::LogicalResult verifyForType(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        MeshAttr mesh, ::mlir::Type type, bool typeIsLocal = false,
        bool allowPadding = false) const;
    /// The per-rank shape of a tensor of `globalShape` under this sharding
    /// (a split that does not divide rounds up: the last pieces are
    /// padded). Precondition: verifyForType succeeded.
    ::llvm::SmallVector<int64_t> getLocalShape(
        MeshAttr mesh, ::llvm::ArrayRef<int64_t> globalShape) const;
  }];
}

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISATTRS_TD
