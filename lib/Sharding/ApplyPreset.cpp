//===- ApplyPreset.cpp - Annotations for a parallelism preset -------------===//
//
// The one place that knows model parameter names: presets translate a
// parallelism recipe into shardings of arguments. Everything downstream is
// generic.
//
//===----------------------------------------------------------------------===//

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

/// The Megatron layout: which dimension of a parameter splits over "tp",
/// by the suffix of its Hugging Face name.
std::optional<int64_t> megatronSplitDim(StringRef name) {
  // Llama (nn.Linear weights are [out, in]).
  for (StringRef columns :
       {".q_proj.weight", ".k_proj.weight", ".v_proj.weight",
        ".gate_proj.weight", ".up_proj.weight"})
    if (name.ends_with(columns))
      return 0;
  for (StringRef rows : {".o_proj.weight", ".down_proj.weight"})
    if (name.ends_with(rows))
      return 1;
  // Vocabulary parallel: embedding tables and the LM head split by rows.
  if (name.ends_with("embed_tokens.weight") || name == "lm_head.weight" ||
      name.ends_with(".wte.weight"))
    return 0;
  // GPT-2 (Conv1D weights are [in, out]).
  if (name.ends_with(".mlp.c_fc.weight"))
    return 1;
  // The fused QKV, held as [E, 3, E] (bias [3, E]): output columns by heads.
  if (name.ends_with(".attn.c_attn.weight"))
    return 2;
  if (name.ends_with(".attn.c_attn.bias"))
    return 1;
  if (name.ends_with(".mlp.c_fc.bias") ||
      name.ends_with(".mlp.c_proj.weight") ||
      name.ends_with(".attn.c_proj.weight"))
    return 0;
  return std::nullopt;
}

struct ApplyPresetPass
    : public trellis::impl::ApplyPresetPassBase<ApplyPresetPass> {
  using ApplyPresetPassBase::ApplyPresetPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t dp = dataParallel, tp = tensorParallel, cp = contextParallel;
    if (dp < 1 || tp < 1 || cp < 1) {
      module.emitError() << "expected dp, cp and tp >= 1, found " << dp << ", "
                         << cp << " and " << tp;
      return signalPassFailure();
    }
    if (dp == 1 && tp == 1 && cp == 1)
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
    SmallVector<MeshAxisAttr> axes = {MeshAxisAttr::get(context, "dp", dp)};
    if (cp > 1)
      axes.push_back(MeshAxisAttr::get(context, "cp", cp));
    axes.push_back(MeshAxisAttr::get(context, "tp", tp));
    MeshAttr mesh = MeshAttr::get(context, axes);
    MeshOp::create(builder, module.getLoc(), "mesh", mesh);
    FlatSymbolRefAttr meshName = FlatSymbolRefAttr::get(context, "mesh");

    // The arguments' attributes, rewritten together at the end (setting
    // them one by one copies every argument's each time).
    SmallVector<NamedAttrList> argAttrs;
    for (unsigned i = 0; i < function.getNumArguments(); ++i)
      argAttrs.emplace_back(function.getArgAttrDict(i));
    // Splits dimension `dim` of argument `i` over `axis`, or fails with the
    // sizes.
    auto split = [&](unsigned i, int64_t dim, StringRef axis,
                     int64_t pieces) -> LogicalResult {
      // The user's own annotations win over the preset's.
      if (argAttrs[i].get(TrellisDialect::kShardingAttrName))
        return success();
      auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
      auto name = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kParamNameAttrName);
      if (type.getRank() <= dim || type.getDimSize(dim) % pieces != 0)
        return function.emitError()
               << "dimension " << dim << " of argument " << i << " \""
               << (name ? name.getValue() : "") << "\" (" << type
               << ") is not divisible by " << axis << "=" << pieces;
      SmallVector<DimShardingAttr> dims(
          type.getRank(), DimShardingAttr::get(context, {}, false));
      dims[dim] =
          DimShardingAttr::get(context, {builder.getStringAttr(axis)}, false);
      argAttrs[i].set(TrellisDialect::kShardingAttrName,
                      ShardingAttr::get(context, meshName, dims));
      return success();
    };

    // Context parallelism: an input's batch over dp (when dp > 1) and its
    // sequence over cp.
    auto splitSequence = [&](unsigned i) -> LogicalResult {
      if (argAttrs[i].get(TrellisDialect::kShardingAttrName))
        return success();
      auto type = llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
      if (type.getRank() != 2 || type.getDimSize(1) % cp != 0 ||
          type.getDimSize(0) % dp != 0) {
        auto name = function.getArgAttrOfType<StringAttr>(
            i, graph::GraphDialect::kParamNameAttrName);
        return function.emitError()
               << "input \"" << (name ? name.getValue() : StringRef("?"))
               << "\" (" << type
               << "): expected [batch, seq] with the batch divisible by dp="
               << dp << " and the sequence by cp=" << cp;
      }
      SmallVector<DimShardingAttr> dims(
          2, DimShardingAttr::get(context, {}, false));
      if (dp > 1)
        dims[0] = DimShardingAttr::get(context, {builder.getStringAttr("dp")},
                                       false);
      dims[1] =
          DimShardingAttr::get(context, {builder.getStringAttr("cp")}, false);
      argAttrs[i].set(TrellisDialect::kShardingAttrName,
                      ShardingAttr::get(context, meshName, dims));
      return success();
    };
    bool sawInput = false;
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      auto name = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kParamNameAttrName);
      if (!role)
        continue;
      if (role.getValue() == "input") {
        sawInput = true;
        if (cp > 1 && failed(splitSequence(i)))
          return signalPassFailure();
        if (dp > 1 && failed(split(i, 0, "dp", dp)))
          return signalPassFailure();
        // The data's layout is fixed: every input alike (whole without dp),
        // whatever the layouts propagation gives the activations.
        if (dp == 1 && !argAttrs[i].get(TrellisDialect::kShardingAttrName)) {
          auto type =
              llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
          SmallVector<DimShardingAttr> dims(
              type.getRank(), DimShardingAttr::get(context, {}, false));
          argAttrs[i].set(TrellisDialect::kShardingAttrName,
                          ShardingAttr::get(context, meshName, dims));
        }
        continue;
      }
      bool parameterLike = role.getValue() == "param" ||
                           role.getValue() == "master" ||
                           role.getValue() == "adam_m" ||
                           role.getValue() == "adam_v";
      if (tp == 1 || !parameterLike || !name)
        continue;
      if (std::optional<int64_t> dim = megatronSplitDim(name.getValue()))
        if (failed(split(i, *dim, "tp", tp)))
          return signalPassFailure();
    }
    if (dp > 1 && !sawInput) {
      function.emitError("found no input argument to split over dp");
      return signalPassFailure();
    }
    SmallVector<DictionaryAttr> dictionaries;
    for (NamedAttrList &attrs : argAttrs)
      dictionaries.push_back(attrs.getDictionary(context));
    function.setAllArgAttrs(dictionaries);
  }
};

} // namespace
