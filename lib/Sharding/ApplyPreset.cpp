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
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "trellis/Dialect/Trellis/IR/TrellisOps.h"
#include "llvm/ADT/StringMap.h"

namespace trellis {
#define GEN_PASS_DEF_APPLYPRESETPASS
#include "trellis/Sharding/Passes.h.inc"
} // namespace trellis

using namespace mlir;
using namespace trellis;

namespace {

/// How a projection's weight is held: nn.Linear's [..., out, in] (the
/// forward reads it transposed) or GPT-2 Conv1D's [..., in, out].
enum class Orientation { OutIn, InOut };

/// Where the Megatron layout splits a parameter over the tensor axis: its
/// output features (column parallel), its input features (row parallel),
/// or a fixed dimension; the rank of the tensor it expects and the
/// orientation its name implies where the program does not show one
/// (named for messages).
struct MegatronSplit {
  enum class Kind { Output, Input, Fixed } kind = Kind::Fixed;
  int64_t dim = 0;
  int64_t rank = 2;
  Orientation named = Orientation::OutIn;
  const char *layout = "";

  /// The dimension to split for a weight held in `orientation`.
  int64_t dimension(Orientation orientation) const {
    bool outIn = orientation == Orientation::OutIn;
    switch (kind) {
    case Kind::Output:
      return outIn ? rank - 2 : rank - 1;
    case Kind::Input:
      return outIn ? rank - 1 : rank - 2;
    case Kind::Fixed:
      break;
    }
    return dim;
  }
};

/// The Megatron layout, by the suffix of a parameter's Hugging Face name.
std::optional<MegatronSplit> megatronSplit(StringRef name) {
  using Kind = MegatronSplit::Kind;
  // A mixture of experts' stacked weights ([E, out, in], "experts.*."):
  // experts stay whole over tp (expert parallelism splits them).
  if (name.contains(".experts.*."))
    return std::nullopt;
  // Llama (nn.Linear weights); DeepSeek-V3's latent attention splits the
  // projections out of its query and key-value latents by heads (the
  // latents' own projections, q_a_proj and kv_a_proj_with_mqa, stay whole,
  // as Megatron-Core's MLA keeps its down projections).
  for (StringRef columns :
       {".q_proj.weight", ".k_proj.weight", ".v_proj.weight",
        ".gate_proj.weight", ".up_proj.weight", ".q_b_proj.weight",
        ".kv_b_proj.weight"})
    if (name.ends_with(columns))
      return MegatronSplit{Kind::Output, 0, 2, Orientation::OutIn,
                           "a projection weight"};
  for (StringRef rows : {".o_proj.weight", ".down_proj.weight"})
    if (name.ends_with(rows))
      return MegatronSplit{Kind::Input, 0, 2, Orientation::OutIn,
                           "a projection weight"};
  // Vocabulary parallel: embedding tables and the LM head split by rows.
  if (name.ends_with("embed_tokens.weight") || name == "lm_head.weight" ||
      name.ends_with(".wte.weight"))
    return MegatronSplit{Kind::Fixed, 0, 2, Orientation::OutIn,
                         "a table [vocab, hidden]"};
  // GPT-2's names (Conv1D weights unless the program reads them as
  // nn.Linear's, as nanoGPT's).
  if (name.ends_with(".mlp.c_fc.weight"))
    return MegatronSplit{Kind::Output, 0, 2, Orientation::InOut,
                         "a projection weight"};
  // The fused QKV, held as [E, 3, E] (Conv1D) or [3, E, E] (nn.Linear),
  // its bias as [3, E]: each piece's output features by heads.
  if (name.ends_with(".attn.c_attn.weight"))
    return MegatronSplit{Kind::Output, 0, 3, Orientation::InOut,
                         "a fused QKV weight held as [E, 3, E] (Conv1D) or "
                         "[3, E, E] (nn.Linear)"};
  if (name.ends_with(".attn.c_attn.bias"))
    return MegatronSplit{Kind::Fixed, 1, 2, Orientation::InOut,
                         "a fused QKV bias held as [3, E]"};
  if (name.ends_with(".mlp.c_fc.bias"))
    return MegatronSplit{Kind::Fixed, 0, 1, Orientation::InOut, "a bias [out]"};
  if (name.ends_with(".mlp.c_proj.weight") ||
      name.ends_with(".attn.c_proj.weight"))
    return MegatronSplit{Kind::Input, 0, 2, Orientation::InOut,
                         "a projection weight"};
  return std::nullopt;
}

/// The orientation the forward reads `weight` in: that of the first
/// matmul (in block order: the forward's, before any gradient's) taking
/// it, through reshapes, slices and casts, as its right operand; none when
/// no matmul does.
std::optional<Orientation> readOrientation(Value weight) {
  graph::MatmulOp first;
  SmallVector<Value> work = {weight};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (isa<graph::ReshapeOp, graph::SliceOp, graph::CastOp>(user)) {
        work.push_back(user->getResult(0));
        continue;
      }
      auto matmul = dyn_cast<graph::MatmulOp>(user);
      if (matmul && use.getOperandNumber() == 1 &&
          (!first || matmul->isBeforeInBlock(first)))
        first = matmul;
    }
  }
  if (!first)
    return std::nullopt;
  return first.getTransposeRhs() ? Orientation::OutIn : Orientation::InOut;
}

/// Names of mesh axes joined for messages: `dp`, `replica x shard`.
std::string joinAxes(ArrayRef<const MeshAxis *> axes) {
  std::string text;
  for (const MeshAxis *axis : axes)
    text += (text.empty() ? "" : " x ") + axis->name;
  return text;
}

struct ApplyPresetPass
    : public trellis::impl::ApplyPresetPassBase<ApplyPresetPass> {
  using ApplyPresetPassBase::ApplyPresetPassBase;

  /// The step's mesh: `mesh`, else the degrees (dp, cp when > 1, tp); null
  /// after a diagnostic.
  std::optional<trellis::Mesh> stepMesh(ModuleOp module) {
    if (meshText.empty()) {
      int64_t dp = dataParallel, tp = tensorParallel, cp = contextParallel;
      if (dp < 1 || tp < 1 || cp < 1) {
        module.emitError() << "expected dp, cp and tp >= 1, found " << dp
                           << ", " << cp << " and " << tp;
        return std::nullopt;
      }
      std::vector<trellis::MeshAxis> axes = {{"dp", dp}};
      if (cp > 1)
        axes.push_back({"cp", cp});
      axes.push_back({"tp", tp});
      return trellis::Mesh::create(std::move(axes), nullptr);
    }
    if (dataParallel != 1 || tensorParallel != 1 || contextParallel != 1) {
      module.emitError("expected the mesh or the degrees (dp, tp, cp), "
                       "found both");
      return std::nullopt;
    }
    trellis::MeshError error;
    std::optional<trellis::Mesh> mesh = trellis::Mesh::parse(meshText, &error);
    if (!mesh) {
      module.emitError() << "mesh '" << meshText << "': " << error.message;
      return std::nullopt;
    }
    for (const trellis::MeshAxis &axis : mesh->axes()) {
      if (axis.role == AxisRole::Unassigned || axis.role == AxisRole::Pipeline) {
        module.emitError()
            << "mesh axis '" << axis.name << "': expected a role of data, "
            << "tensor, context or expert (the pipeline phase adds the "
               "pipeline's axis), found "
            << axisRoleName(axis.role);
        return std::nullopt;
      }
    }
    for (AxisRole role : {AxisRole::Tensor, AxisRole::Context})
      if (mesh->axesWithRole(role).size() > 1) {
        module.emitError() << "mesh '" << meshText << "': expected at most one "
                           << axisRoleName(role) << " axis";
        return std::nullopt;
      }
    return mesh;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<trellis::Mesh> stepMesh = this->stepMesh(module);
    if (!stepMesh)
      return signalPassFailure();
    if (stepMesh->size() == 1)
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
    SmallVector<MeshAxisAttr> axes;
    for (const trellis::MeshAxis &axis : stepMesh->axes())
      axes.push_back(MeshAxisAttr::get(context, axis.name, axis.size, axis.role));
    MeshAttr mesh = MeshAttr::get(context, axes);
    MeshOp::create(builder, module.getLoc(), "mesh", mesh);
    FlatSymbolRefAttr meshName = FlatSymbolRefAttr::get(context, "mesh");

    // The axes of more than one rank by role: the batch's (data and
    // expert), the tensor axis, the context axis.
    SmallVector<const trellis::MeshAxis *> batchAxes, tensorAxes, contextAxes;
    for (const trellis::MeshAxis &axis : stepMesh->axes()) {
      if (axis.size == 1)
        continue;
      if (splitsBatch(axis.role))
        batchAxes.push_back(&axis);
      else if (axis.role == AxisRole::Tensor)
        tensorAxes.push_back(&axis);
      else if (axis.role == AxisRole::Context)
        contextAxes.push_back(&axis);
    }
    int64_t dp = 1, tp = tensorAxes.empty() ? 1 : tensorAxes[0]->size,
            cp = contextAxes.empty() ? 1 : contextAxes[0]->size;
    for (const trellis::MeshAxis *axis : batchAxes)
      dp *= axis->size;
    std::string batchName = batchAxes.empty() ? "dp" : joinAxes(batchAxes);
    std::string contextName = contextAxes.empty() ? "cp" : joinAxes(contextAxes);
    auto axisNames = [&](ArrayRef<const trellis::MeshAxis *> list) {
      SmallVector<StringAttr> names;
      for (const trellis::MeshAxis *axis : list)
        names.push_back(builder.getStringAttr(axis->name));
      return names;
    };

    // The arguments' attributes, rewritten together at the end (setting
    // them one by one copies every argument's each time).
    SmallVector<NamedAttrList> argAttrs;
    for (unsigned i = 0; i < function.getNumArguments(); ++i)
      argAttrs.emplace_back(function.getArgAttrDict(i));
    // Splits dimension `dim` of argument `i` over `splitAxes`, or fails
    // with the sizes.
    auto split = [&](unsigned i, int64_t dim,
                     ArrayRef<const trellis::MeshAxis *> splitAxes,
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
               << ") is not divisible by " << joinAxes(splitAxes) << "="
               << pieces;
      SmallVector<DimShardingAttr> dims(
          type.getRank(), DimShardingAttr::get(context, {}, false));
      dims[dim] = DimShardingAttr::get(context, axisNames(splitAxes), false);
      argAttrs[i].set(TrellisDialect::kShardingAttrName,
                      ShardingAttr::get(context, meshName, dims));
      return success();
    };

    // Context parallelism: an input's batch over the batch axes (when they
    // split it) and its sequence over the context axis.
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
               << "): expected [batch, seq] with the batch divisible by "
               << batchName << "=" << dp << " and the sequence by "
               << contextName << "=" << cp;
      }
      SmallVector<DimShardingAttr> dims(
          2, DimShardingAttr::get(context, {}, false));
      if (dp > 1)
        dims[0] = DimShardingAttr::get(context, axisNames(batchAxes), false);
      dims[1] = DimShardingAttr::get(context, axisNames(contextAxes), false);
      argAttrs[i].set(TrellisDialect::kShardingAttrName,
                      ShardingAttr::get(context, meshName, dims));
      return success();
    };
    // How the forward reads each parameter (its optimizer's copies and
    // moments follow it by name).
    llvm::StringMap<std::optional<Orientation>> orientations;
    for (unsigned i = 0; i < function.getNumArguments(); ++i) {
      auto role = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kRoleAttrName);
      auto name = function.getArgAttrOfType<StringAttr>(
          i, graph::GraphDialect::kParamNameAttrName);
      if (role && name &&
          (role.getValue() == "param" || role.getValue() == "master"))
        if (std::optional<Orientation> read =
                readOrientation(function.getArgument(i)))
          orientations[name.getValue()] = read;
    }
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
        if (dp > 1 && failed(split(i, 0, batchAxes, dp)))
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
      if (std::optional<MegatronSplit> rule = megatronSplit(name.getValue())) {
        // A weight of another layout under a known name (a fused QKV held
        // whole, [3E, E]) would be split across heads.
        auto type =
            llvm::cast<RankedTensorType>(function.getArgumentTypes()[i]);
        if (type.getRank() != rule->rank) {
          function.emitError()
              << "the Megatron layout splits \"" << name.getValue() << "\" as "
              << rule->layout << " (rank " << rule->rank << "), found " << type
              << ": a weight of another layout under that name cannot be "
                 "split by heads; train this model with dp, pp or ZeRO "
                 "instead of tp";
          return signalPassFailure();
        }
        Orientation orientation =
            orientations.lookup(name.getValue()).value_or(rule->named);
        if (failed(split(i, rule->dimension(orientation), tensorAxes, tp)))
          return signalPassFailure();
      }
    }
    if (dp > 1 && !sawInput) {
      function.emitError() << "found no input argument to split over "
                           << batchName;
      return signalPassFailure();
    }
    SmallVector<DictionaryAttr> dictionaries;
    for (NamedAttrList &attrs : argAttrs)
      dictionaries.push_back(attrs.getDictionary(context));
    function.setAllArgAttrs(dictionaries);
  }
};

} // namespace
