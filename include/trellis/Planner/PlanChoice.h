//===- PlanChoice.h - One plan: a mesh and option assignments ---*- C++ -*-===//
//
// What the planner decides for a plan: a mesh of any axes (each with its
// role), the sequences per micro-batch, and the values of the compile
// options it chooses (planSettings: ZeRO and its axes, sequence
// parallelism, the context kind, the schedule and chunks, recomputation).
// A plan's --evaluate text, its `trellis compile` flags and
// trellis.compile's keywords all come from the compile option table's rows
// (trellis/Compiler/CompileOptionTable.h), and an --evaluate string parses
// into the constraints the search keeps by the same rows.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_PLANCHOICE_H
#define TRELLIS_PLANNER_PLANCHOICE_H

#include "trellis/Common/Mesh.h"
#include "trellis/Common/OptionTable.h"
#include "trellis/Compiler/Compile.h"

#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trellis::planner {

struct PlanChoice;

/// A knob of a plan, in the order its text lists them: a compile option's
/// row (`zero`, `cp-kind`), or `micro-batch`, the planner's own (the
/// sequences per micro-batch, which sets --microbatches).
struct PlanSetting {
  const char *name;
  /// Whether a plan sets it, by its mesh (cp-kind: a context axis; the
  /// schedule: a pipeline); null: every plan.
  bool (*applies)(const PlanChoice &) = nullptr;
  /// A bool the search turns on where it applies (sp), unlike the
  /// compiler: a plan's text says it either way.
  bool searchedOn = false;
};

/// The mesh the compiler builds from --pp, --dp, --ep, --cp and --tp: pp,
/// dp, ep and cp where they split, tp.
std::vector<MeshAxis> meshOfDegrees(int64_t pp, int64_t dp, int64_t ep,
                                    int64_t cp, int64_t tp);

/// The knobs, in the order a plan's text lists them.
const std::vector<PlanSetting> &planSettings();

/// Whether a plan sets the compile option `name` (PlanChoice::applyTo):
/// the mesh's (mesh, pp, dp, ep, cp, tp), microbatches, and the rows of
/// planSettings().
bool planSetsOption(llvm::StringRef name);

/// One plan.
struct PlanChoice {
  /// The mesh, major to minor, each axis with its role. The search builds
  /// pp, dp, ep, cp, tp (ep and cp where they split; HSDP: dp_replicate
  /// and dp_shard for dp); an --evaluate string may name any axes.
  std::vector<MeshAxis> mesh;
  /// Sequences per micro-batch on each batch rank.
  int64_t microBatchSize = 1;
  /// The values of the compile options of planSettings(); the rest of it
  /// stays default.
  CompileOptions settings;

  /// The ranks along the axes of `role` (1 when none).
  int64_t degree(AxisRole role) const;
  int64_t gpus() const;
  /// The ranks the batch splits over (data and expert axes).
  int64_t batchRanks() const;
  /// The pipeline schedule (1f1b when none is set).
  std::string schedule() const;
  /// Model chunks per pipeline rank (the interleaved schedule's; else 1).
  int64_t chunksPerRank() const;
  /// Micro-batches per step for `globalBatch` sequences.
  int64_t microBatches(int64_t globalBatch) const;
  /// Whether --pp, --dp, --ep, --cp and --tp describe the mesh
  /// (meshOfDegrees of its degrees).
  bool describedByDegrees() const;
  /// `options` with this plan's mesh, micro-batches (for `globalBatch`
  /// sequences) and the settings that apply to it; the rest as it was.
  CompileOptions applyTo(CompileOptions options, int64_t globalBatch) const;
  /// The --evaluate text of this plan: the mesh's axes, then each setting
  /// that applies (a bool where it differs from the compiler's default).
  std::string text() const;
  /// `trellis compile`'s flags for this plan: the batch, sequence and
  /// micro-batches, then each option the plan sets that differs from the
  /// compiler's default, in the option table's order.
  std::string flags(int64_t globalBatch, int64_t seq,
                    const std::string &precision) const;
  /// trellis.compile's keywords for this plan beyond the batch, sequence
  /// and precision: the micro-batches and each option it sets that
  /// differs from the default.
  llvm::json::Object compileKeywords(int64_t globalBatch, int64_t seq,
                                     const std::string &precision) const;
};

/// What an --evaluate string fixes; the rest the planner chooses.
struct PlanConstraints {
  /// The axes it names, in its order (`dp=2`, `dp_shard=4`,
  /// `model:tensor=2`): each fixes its role's degree, and two data axes fix
  /// the data axes themselves (HSDP).
  std::vector<MeshAxis> axes;
  std::optional<int64_t> microBatchSize;
  /// The compile options it fixes, by row name.
  std::map<std::string, OptionValue> settings;

  /// The product of the named axes of `role`; nullopt when none is named.
  std::optional<int64_t> degree(AxisRole role) const;
  /// The value of setting `name` when fixed.
  const OptionValue *setting(const std::string &name) const;
};

/// Parses `pp=8,dp=16,tp=8,sp,zero=1,schedule=interleaved,chunks=4,
/// micro-batch=1,recompute=full`: mesh axes (dp, tp, pp, cp, ep,
/// dp_replicate, dp_shard, or NAME:ROLE=N), the settings by their compile
/// option names (a bool as `sp`, `no-sp` or `name=true|false`; words among
/// the row's choices) and micro-batch. Unknown keys, malformed numbers and
/// impossible values are errors naming them.
std::optional<PlanConstraints> parsePlanConstraints(llvm::StringRef text,
                                                    std::string &error);

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_PLANCHOICE_H
