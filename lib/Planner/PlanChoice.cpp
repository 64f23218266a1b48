//===- PlanChoice.cpp - One plan: a mesh and option assignments -----------===//

#include "trellis/Planner/PlanChoice.h"

#include "trellis/Compiler/CompileOptionTable.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace trellis::planner {

namespace {

const OptionRow<CompileOptions> &compileRow(llvm::StringRef name) {
  const OptionRow<CompileOptions> *row =
      findOption(compileOptionTable(), std::string_view(name));
  assert(row && "a plan setting names a compile option");
  return *row;
}

constexpr const char *kMicroBatch = "micro-batch";

/// The mesh's axes as --mesh and --evaluate write them: `name=N`, or
/// `name:role=N` where the name implies another role.
std::string meshText(const std::vector<MeshAxis> &mesh) {
  std::string text;
  for (const MeshAxis &axis : mesh) {
    text += text.empty() ? "" : ",";
    text += axis.name;
    if (impliedAxisRole(axis.name) != axis.role)
      text += ":" + std::string(axisRoleName(axis.role));
    text += "=" + std::to_string(axis.size);
  }
  return text;
}

/// `value` of `row` in a plan's text: `name=value`; a bool `name` or
/// `name=false`.
std::string settingText(const OptionRow<CompileOptions> &row,
                        const OptionValue &value) {
  if (row.type == OptionType::Bool)
    return value.flag ? row.name : std::string(row.name) + "=false";
  return std::string(row.name) + "=" + formatOptionValue(row.type, value);
}

/// A compile option without the batch, sequence and micro-batches, the
/// values `flags` and `compileKeywords` start from.
CompileOptions unsized() {
  CompileOptions options;
  options.batch = options.seq = options.microBatches = 0;
  return options;
}

} // namespace

const std::vector<PlanSetting> &planSettings() {
  static const std::vector<PlanSetting> settings = {
      {"cp-kind",
       [](const PlanChoice &c) { return c.degree(AxisRole::Context) > 1; }},
      {"sp", [](const PlanChoice &c) { return c.degree(AxisRole::Tensor) > 1; },
       /*searchedOn=*/true},
      {"zero"},
      {"zero-axes", [](const PlanChoice &c) { return c.settings.zero > 0; }},
      {"schedule",
       [](const PlanChoice &c) { return c.degree(AxisRole::Pipeline) > 1; }},
      {"chunks",
       [](const PlanChoice &c) {
         return c.degree(AxisRole::Pipeline) > 1 &&
                c.schedule() == "interleaved";
       }},
      {kMicroBatch},
      {"recompute"},
      {"fuse-gradient-accumulation"},
      {"schedule-collectives"},
  };
  return settings;
}

bool planSetsOption(llvm::StringRef name) {
  for (const char *option :
       {"mesh", "pp", "dp", "ep", "cp", "tp", "microbatches"})
    if (name == option)
      return true;
  return name != kMicroBatch &&
         llvm::any_of(planSettings(), [&](const PlanSetting &setting) {
           return name == setting.name;
         });
}

int64_t PlanChoice::degree(AxisRole role) const {
  int64_t ranks = 1;
  for (const MeshAxis &axis : mesh)
    if (axis.role == role)
      ranks *= axis.size;
  return ranks;
}

int64_t PlanChoice::gpus() const {
  int64_t ranks = 1;
  for (const MeshAxis &axis : mesh)
    ranks *= axis.size;
  return ranks;
}

int64_t PlanChoice::batchRanks() const {
  return degree(AxisRole::Data) * degree(AxisRole::Expert);
}

std::string PlanChoice::schedule() const {
  return settings.schedule.value_or("1f1b");
}

int64_t PlanChoice::chunksPerRank() const {
  return schedule() == "interleaved" ? settings.chunks.value_or(1) : 1;
}

int64_t PlanChoice::microBatches(int64_t globalBatch) const {
  return globalBatch / (batchRanks() * microBatchSize);
}

std::vector<MeshAxis> meshOfDegrees(int64_t pp, int64_t dp, int64_t ep,
                                    int64_t cp, int64_t tp) {
  std::vector<MeshAxis> mesh{{"pp", pp, AxisRole::Pipeline},
                             {"dp", dp, AxisRole::Data}};
  if (ep > 1)
    mesh.push_back({"ep", ep, AxisRole::Expert});
  if (cp > 1)
    mesh.push_back({"cp", cp, AxisRole::Context});
  mesh.push_back({"tp", tp, AxisRole::Tensor});
  return mesh;
}

bool PlanChoice::describedByDegrees() const {
  return mesh == meshOfDegrees(degree(AxisRole::Pipeline),
                               degree(AxisRole::Data), degree(AxisRole::Expert),
                               degree(AxisRole::Context),
                               degree(AxisRole::Tensor));
}

CompileOptions PlanChoice::applyTo(CompileOptions options,
                                   int64_t globalBatch) const {
  options.microBatches = microBatches(globalBatch);
  options.mesh.reset();
  options.pipeline.reset();
  options.dataParallel.reset();
  options.expertParallel.reset();
  options.contextParallel.reset();
  options.tensorParallel.reset();
  if (describedByDegrees()) {
    auto set = [&](std::optional<int64_t> &field, AxisRole role) {
      if (degree(role) > 1)
        field = degree(role);
    };
    set(options.pipeline, AxisRole::Pipeline);
    set(options.dataParallel, AxisRole::Data);
    set(options.expertParallel, AxisRole::Expert);
    set(options.contextParallel, AxisRole::Context);
    set(options.tensorParallel, AxisRole::Tensor);
  } else {
    options.mesh = meshText(mesh);
  }
  for (const PlanSetting &setting : planSettings()) {
    if (setting.name == llvm::StringRef(kMicroBatch) ||
        (setting.applies && !setting.applies(*this)))
      continue;
    const OptionRow<CompileOptions> &row = compileRow(setting.name);
    row.set(options, row.get(settings));
  }
  return options;
}

std::string PlanChoice::text() const {
  std::string text = meshText(mesh);
  const CompileOptions defaults;
  for (const PlanSetting &setting : planSettings()) {
    if (setting.applies && !setting.applies(*this))
      continue;
    if (setting.name == llvm::StringRef(kMicroBatch)) {
      text += llvm::formatv(",{0}={1}", kMicroBatch, microBatchSize).str();
      continue;
    }
    const OptionRow<CompileOptions> &row = compileRow(setting.name);
    OptionValue value = row.get(settings);
    // A bool where it differs from the compiler's default, or from the
    // search's (sp off under tp): the text fixes the plan it names.
    if (value.unset || (row.type == OptionType::Bool &&
                        sameOptionValue(row.type, value, row.get(defaults)) &&
                        !(setting.searchedOn && !value.flag)))
      continue;
    text += "," + settingText(row, value);
  }
  return text;
}

std::string PlanChoice::flags(int64_t globalBatch, int64_t seq,
                              const std::string &precision) const {
  CompileOptions options = unsized();
  options.batch = globalBatch;
  options.seq = seq;
  options.precision = precision;
  return formatCommandLine(changedOptions(
      compileOptionTable(), applyTo(options, globalBatch), unsized()));
}

llvm::json::Object
PlanChoice::compileKeywords(int64_t globalBatch, int64_t seq,
                            const std::string &precision) const {
  CompileOptions base;
  base.batch = globalBatch;
  base.seq = seq;
  base.precision = precision;
  base.microBatches = 0;
  llvm::json::Object keywords;
  for (const OptionAssignment<CompileOptions> &assignment :
       changedOptions(compileOptionTable(), applyTo(base, globalBatch), base)) {
    std::string keyword = assignment.row->name;
    std::replace(keyword.begin(), keyword.end(), '-', '_');
    const OptionValue &value = assignment.value;
    switch (assignment.row->type) {
    case OptionType::Int:
      keywords[keyword] = value.integer;
      break;
    case OptionType::Double:
      keywords[keyword] = value.number;
      break;
    case OptionType::String:
      keywords[keyword] = value.text;
      break;
    case OptionType::Bool:
      keywords[keyword] = value.flag;
      break;
    }
  }
  return keywords;
}

std::optional<int64_t> PlanConstraints::degree(AxisRole role) const {
  std::optional<int64_t> ranks;
  for (const MeshAxis &axis : axes)
    if (axis.role == role)
      ranks = ranks.value_or(1) * axis.size;
  return ranks;
}

const OptionValue *PlanConstraints::setting(const std::string &name) const {
  auto found = settings.find(name);
  return found == settings.end() ? nullptr : &found->second;
}

std::optional<PlanConstraints> parsePlanConstraints(llvm::StringRef text,
                                                    std::string &error) {
  PlanConstraints constraints;
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    item = item.trim();
    auto [key, value] = item.split('=');
    key = key.trim();
    value = value.trim();
    bool hasValue = item.contains('=');
    auto fail = [&](const llvm::Twine &message) {
      error = ("'" + item + "': " + message).str();
      return std::nullopt;
    };
    auto number = [&](int64_t &out) {
      if (!hasValue || value.getAsInteger(10, out) || out < 1) {
        error = llvm::formatv("'{0}': expected {1}=N with N >= 1, found '{2}'",
                              item, key, value)
                    .str();
        return false;
      }
      return true;
    };
    if (key == kMicroBatch) {
      int64_t size = 0;
      if (!number(size))
        return std::nullopt;
      constraints.microBatchSize = size;
      continue;
    }
    if (!hasValue && key.consume_front("no-")) {
      const OptionRow<CompileOptions> *row =
          findOption(compileOptionTable(), std::string_view(key));
      bool known = llvm::any_of(
          planSettings(), [&](const PlanSetting &s) { return key == s.name; });
      if (!row || !known || row->type != OptionType::Bool)
        return fail("unknown setting 'no-" + key + "'");
      constraints.settings[key.str()].flag = false;
      continue;
    }
    bool isSetting = llvm::any_of(
        planSettings(), [&](const PlanSetting &s) { return key == s.name; });
    if (isSetting) {
      const OptionRow<CompileOptions> &row = compileRow(key);
      OptionValue parsed;
      switch (row.type) {
      case OptionType::Bool:
        if (!hasValue)
          parsed.flag = true;
        else if (value == "true" || value == "false")
          parsed.flag = value == "true";
        else
          return fail(llvm::formatv("expected {0}=true or {0}=false, found "
                                    "'{1}'",
                                    key, value));
        break;
      case OptionType::Int:
        if (row.check) {
          if (!hasValue || value.getAsInteger(10, parsed.integer))
            return fail(
                llvm::formatv("expected {0}=N, found '{1}'", key, value));
        } else if (!number(parsed.integer)) {
          return std::nullopt;
        }
        break;
      case OptionType::String:
        // One word: the items split at commas.
        parsed.text = value.str();
        break;
      case OptionType::Double:
        if (!hasValue || value.getAsDouble(parsed.number))
          return fail(llvm::formatv("expected {0}=X, found '{1}'", key, value));
        break;
      }
      if (std::string problem = checkOptionValue(row, parsed); !problem.empty())
        return fail(problem);
      constraints.settings[key.str()] = parsed;
      continue;
    }
    // A mesh axis: `name=N`, or `name:role=N`.
    auto [name, roleName] = key.split(':');
    AxisRole role = impliedAxisRole(std::string_view(name));
    if (!roleName.empty()) {
      std::optional<AxisRole> given = parseAxisRole(std::string_view(roleName));
      if (!given || *given == AxisRole::Unassigned)
        return fail("unknown role '" + roleName +
                    "' (expected data, tensor, pipeline, context or expert)");
      if (role != AxisRole::Unassigned && role != *given)
        return fail("the name " + name + " implies the " +
                    std::string(axisRoleName(role)) +
                    " role: expected another name for a " + roleName + " axis");
      role = *given;
    }
    if (role == AxisRole::Unassigned) {
      std::string settings = "no-sp";
      for (const PlanSetting &setting : planSettings())
        settings += std::string(",") + setting.name;
      return fail("unknown setting '" + key +
                  "' (expected an axis: dp, tp, pp, cp, ep, dp_replicate, "
                  "dp_shard or NAME:ROLE; or a setting: " +
                  listChoices(settings) + ")");
    }
    MeshAxis axis{name.str(), 0, role};
    if (!number(axis.size))
      return std::nullopt;
    for (const MeshAxis &other : constraints.axes) {
      if (other.name == axis.name)
        return fail("axis '" + name + "' given twice");
      if (other.role == role && role != AxisRole::Data)
        return fail("expected at most one " + std::string(axisRoleName(role)) +
                    " axis, found '" + other.name + "' and '" + name + "'");
    }
    constraints.axes.push_back(std::move(axis));
  }
  auto fixedText = [&](const char *name) -> std::optional<std::string> {
    if (const OptionValue *value = constraints.setting(name))
      return value->text;
    return std::nullopt;
  };
  const OptionValue *chunks = constraints.setting("chunks");
  if (chunks && chunks->integer > 1 &&
      fixedText("schedule").value_or("interleaved") != "interleaved") {
    error = "chunks > 1 needs schedule=interleaved";
    return std::nullopt;
  }
  if (fixedText("schedule") &&
      constraints.degree(AxisRole::Pipeline).value_or(2) == 1) {
    error = "a schedule needs a pipeline (pp > 1)";
    return std::nullopt;
  }
  const OptionValue *sp = constraints.setting("sp");
  if (sp && sp->flag && constraints.degree(AxisRole::Tensor).value_or(2) == 1) {
    error = "sp needs tensor parallelism (tp > 1)";
    return std::nullopt;
  }
  if (std::optional<std::string> axes = fixedText("zero-axes")) {
    // An axis given, or dp or ep where the search builds them (no axis of
    // their role has another name).
    auto builds = [&](const char *name, AxisRole role) {
      return *axes == name &&
             llvm::none_of(constraints.axes, [&](const MeshAxis &axis) {
               return axis.role == role && axis.name != name;
             });
    };
    bool named = builds("dp", AxisRole::Data) ||
                 builds("ep", AxisRole::Expert) ||
                 llvm::any_of(constraints.axes, [&](const MeshAxis &axis) {
                   return axis.name == *axes && splitsBatch(axis.role);
                 });
    if (!named) {
      error = "zero-axes=" + *axes +
              " names the data axis ZeRO shards over: expected it among "
              "the axes given (dp_replicate=2,dp_shard=4,zero-axes=dp_shard)";
      return std::nullopt;
    }
  }
  return constraints;
}

} // namespace trellis::planner
