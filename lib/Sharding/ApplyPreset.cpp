//===- ApplyPreset.cpp - Annotations for a parallelism preset -------------===//

#include "trellis/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"

namespace trellis {
#define GEN_PASS_DEF_APPLYPRESETPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

struct ApplyPresetPass
    : public trellis::impl::ApplyPresetPassBase<ApplyPresetPass> {
  using ApplyPresetPassBase::ApplyPresetPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t dp = dataParallel;
    if (dp < 1) {
      module.emitError() << "expected dp >= 1, found " << dp;
      return signalPassFailure();
    }
    if (dp == 1)
      return;
    auto function = module.lookupSymbol<func::FuncOp>(functionName);
    if (!function) {
      module.emitError() << "expected a function @" << functionName
                         << " to annotate, found none";
      return signalPassFailure();
    }
    if (module.lookupSymbol("mesh")) {
      module.emitError("a symbol @mesh exists already");
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    OpBuilder builder(context);
    builder.setInsertionPointToStart(module.getBody());
    MeshAttr mesh = MeshAttr::get(
        context, {MeshAxisAttr::get(context, "dp", dp)});
    MeshOp::create(builder, module.getLoc(), "mesh", mesh);
    FlatSymbolRefAttr meshName = FlatSymbolRefAttr::get(context, "mesh");
    StringAttr dpAxis = builder.getStringAttr("dp");

    bool annotated = false;
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      if (!role || role.getValue() != "input")
        continue;
      auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
      if (type.getRank() < 1 || type.getDimSize(0) % dp != 0) {
        function.emitError() << "the batch of input argument " << i << " ("
                             << type << ") is not divisible by dp=" << dp;
        return signalPassFailure();
      }
      SmallVector<DimShardingAttr> dims(
          type.getRank(), DimShardingAttr::get(context, {}, false));
      dims[0] = DimShardingAttr::get(context, {dpAxis}, false);
      function.setArgAttr(i, TrellisDialect::kShardingAttrName,
                          ShardingAttr::get(context, meshName, dims));
      annotated = true;
    }
    if (!annotated) {
      function.emitError("found no input argument to split over dp");
      return signalPassFailure();
    }
  }
};

} // namespace
