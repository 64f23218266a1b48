//===- TrellisEnums.td - Enumerations of the trellis dialect -*- tablegen -*-===//

#ifndef TRELLIS_DIALECT_TRELLIS_IR_TRELLISENUMS_TD
#define TRELLIS_DIALECT_TRELLIS_IR_TRELLISENUMS_TD

include "mlir/IR/EnumAttr.td"
include "trellis/Dialect/Trellis/IR/TrellisDialect.td"

def Trellis_ReductionKind : I32EnumAttr<"ReductionKind",
    "how partial values combine across ranks", [
      I32EnumAttrCase<"Sum", 0, "sum">,
      I32EnumAttrCase<"Max", 1, "max">,
      I32EnumAttrCase<"Min", 2, "min">
    ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::trellis";
}

def Trellis_ReductionKindAttr
    : EnumAttr<Trellis_Dialect, Trellis_ReductionKind, "reduction">;

#endif // TRELLIS_DIALECT_TRELLIS_IR_TRELLISENUMS_TD
