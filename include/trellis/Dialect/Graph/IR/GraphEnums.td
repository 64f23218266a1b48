//===- GraphEnums.td - Enumerations of the graph dialect ---*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_TD
#define TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_TD

include "mlir/IR/EnumAttr.td"

// The pointwise functions of the unary ops; `graph.unary_grad` names the one
// it differentiates.
def Graph_UnaryFunction : I32EnumAttr<"UnaryFunction", "a pointwise function", [
    I32EnumAttrCase<"Neg", 0, "neg">,
    I32EnumAttrCase<"Exp", 1, "exp">,
    I32EnumAttrCase<"Log", 2, "log">,
    I32EnumAttrCase<"Tanh", 3, "tanh">,
    I32EnumAttrCase<"Sqrt", 4, "sqrt">,
    I32EnumAttrCase<"Rsqrt", 5, "rsqrt">,
    I32EnumAttrCase<"Sigmoid", 6, "sigmoid">,
    I32EnumAttrCase<"Silu", 7, "silu">,
    I32EnumAttrCase<"Gelu", 8, "gelu">,
    I32EnumAttrCase<"GeluTanh", 9, "gelu_tanh">,
    I32EnumAttrCase<"Relu", 10, "relu">,
    I32EnumAttrCase<"Softplus", 11, "softplus">,
    I32EnumAttrCase<"Abs", 12, "abs">
  ]> {
  let cppNamespace = "::trellis::graph";
}

// The kinds of model part (#graph.part).
def Graph_PartKind : I32EnumAttr<"PartKind", "a kind of model part", [
    I32EnumAttrCase<"Embedding", 0, "embedding">,
    I32EnumAttrCase<"Layer", 1, "layer">,
    I32EnumAttrCase<"Head", 2, "head">
  ]> {
  let cppNamespace = "::trellis::graph";
  let genSpecializedAttr = 0;
}

#endif // TRELLIS_DIALECT_GRAPH_IR_GRAPHENUMS_TD
