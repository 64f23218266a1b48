//===- GraphAttrs.td - Attributes of the graph dialect -----*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_TD
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "trellis/Dialect/Graph/IR/GraphDialect.td"
include "trellis/Dialect/Graph/IR/GraphEnums.td"

def Graph_PartAttr : AttrDef<Graph_Dialect, "Part"> {
  let mnemonic = "part";
  let summary = "The model part an op belongs to: embedding, layer N or head";
  let description = [{
    Held by ops under the name `graph.part` (GraphDialect::kPartAttrName) and
    read through `getModelPart(op)` alone. The importer marks every op of a
    model with it; hand-written MLIR may declare it. Passes that split a
    model by parts (pipeline stage assignment, recomputation, gradient
    buckets, the cost model, per-part gradient sums of tied parameters)
    read nothing else: not names, not locations. Ops that autodiff builds
    for an op's gradient carry that op's part.

    Printed `#graph.part<embedding>`, `#graph.part<layer 7>`,
    `#graph.part<head>` (the head includes the loss). Parts come in model
    order: the embedding, layers 0, 1, ..., the head (`getOrder`).
    Verified: a layer index >= 0; no index on the embedding or the head.
  }];
  let parameters = (ins EnumParameter<Graph_PartKind>:$kind,
                        "int64_t":$layer);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static PartAttr getEmbedding(::mlir::MLIRContext *context) {
      return get(context, PartKind::Embedding, 0);
    }
    static PartAttr getLayer(::mlir::MLIRContext *context, int64_t layer) {
      return get(context, PartKind::Layer, layer);
    }
    static PartAttr getHead(::mlir::MLIRContext *context) {
      return get(context, PartKind::Head, 0);
    }
    bool isEmbedding() const { return getKind() == PartKind::Embedding; }
    bool isLayer() const { return getKind() == PartKind::Layer; }
    bool isHead() const { return getKind() == PartKind::Head; }
    /// Position in model order: 0 for the embedding, 1 + N for layer N,
    /// INT64_MAX for the head.
    int64_t getOrder() const;
    /// `embedding`, `layer 7`, `head`: for diagnostics and reports.
    std::string str() const;
  }];
}

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHATTRS_TD
