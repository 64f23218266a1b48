//===- GroupsCommand.cpp - `trellis groups` -------------------------------===//
//
// Prints, for every rank of a mesh (or one rank), its coordinates, its group
// along each mesh axis, its pipeline stage and the ranks that hold one full
// model copy with it (its group along every axis but the data-parallel one).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "trellis/Common/Mesh.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand groupsCommand("groups",
                             "Print the process groups of a device mesh");

namespace {

cl::OptionCategory meshCategory("Mesh");

cl::opt<std::string>
    meshOption("mesh",
               cl::desc("Mesh axes, major to minor, e.g. dp=2,pp=2,tp=4"),
               cl::value_desc("axes"), cl::Required, cl::cat(meshCategory), cl::sub(groupsCommand));
cl::opt<int64_t> rankOption("rank", cl::desc("Print only this rank"),
                            cl::init(-1), cl::cat(meshCategory), cl::sub(groupsCommand));
cl::opt<int64_t> worldSizeOption(
    "world-size", cl::desc("Fail unless the mesh has exactly this many ranks"),
    cl::init(-1), cl::cat(meshCategory), cl::sub(groupsCommand));
cl::opt<std::string> pipelineAxisOption(
    "pipeline-axis",
    cl::desc("Axis whose coordinate is the pipeline stage (default: the "
             "mesh's pipeline axis, pp or one named name:pipeline=N)"),
    cl::init(""), cl::cat(meshCategory), cl::sub(groupsCommand));
cl::opt<std::string> dataAxisOption(
    "data-axis",
    cl::desc("Axis over which the model is replicated (default: the mesh's "
             "first data axis, dp or one named name:data=N)"),
    cl::init(""), cl::cat(meshCategory), cl::sub(groupsCommand));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "trellis groups") << message << "\n";
  return 1;
}

/// Resolves an axis option: the named axis, or the mesh's first axis of
/// `role` when the option is empty. Fails on an unknown name.
bool resolveAxis(const Mesh &mesh, const std::string &option,
                 const char *optionName, AxisRole role,
                 std::optional<size_t> &axis) {
  if (option.empty()) {
    std::vector<size_t> withRole = mesh.axesWithRole(role);
    axis = withRole.empty() ? std::nullopt
                            : std::optional<size_t>(withRole.front());
    return true;
  }
  axis = mesh.axisIndex(option);
  if (axis)
    return true;
  fail(llvm::formatv("--{0}: unknown mesh axis \"{1}\" in mesh {2}", optionName,
                     option, mesh.toString()));
  return false;
}

} // namespace

int runGroupsCommand() {
  std::optional<Mesh> mesh = parseMeshOption(meshOption);
  if (!mesh)
    return 1;
  MeshError error;
  if (worldSizeOption != -1 && !mesh->matchesWorldSize(worldSizeOption, &error))
    return fail(error.message);
  if (rankOption != -1 && (rankOption < 0 || rankOption >= mesh->size()))
    return fail(llvm::formatv("--rank: expected a rank in [0, {0}), found {1}",
                              mesh->size(), rankOption.getValue()));
  std::optional<size_t> pipelineAxis, dataAxis;
  if (!resolveAxis(*mesh, pipelineAxisOption, "pipeline-axis",
                   AxisRole::Pipeline, pipelineAxis) ||
      !resolveAxis(*mesh, dataAxisOption, "data-axis", AxisRole::Data,
                   dataAxis))
    return 1;

  std::vector<size_t> modelCopyAxes;
  for (size_t axis = 0; axis < mesh->numAxes(); ++axis)
    if (axis != dataAxis)
      modelCopyAxes.push_back(axis);

  // Build every cell first so that columns can be aligned.
  std::vector<std::string> header = {"rank"};
  for (const MeshAxis &axis : mesh->axes())
    header.push_back(axis.name);
  header.push_back("stage");
  for (const MeshAxis &axis : mesh->axes())
    header.push_back(axis.name + "-group");
  header.push_back("model-copy");
  std::vector<std::vector<std::string>> rows = {header};

  int64_t first = rankOption == -1 ? 0 : rankOption.getValue();
  int64_t last = rankOption == -1 ? mesh->size() - 1 : rankOption.getValue();
  for (int64_t rank = first; rank <= last; ++rank) {
    std::vector<std::string> row = {std::to_string(rank)};
    for (int64_t coordinate : mesh->coordinates(rank))
      row.push_back(std::to_string(coordinate));
    row.push_back(std::to_string(pipelineAxis ? mesh->stage(rank, *pipelineAxis)
                                              : int64_t(0)));
    for (size_t axis = 0; axis < mesh->numAxes(); ++axis)
      row.push_back(formatRankSet(mesh->group(rank, {axis})));
    row.push_back(formatRankSet(mesh->group(rank, modelCopyAxes)));
    rows.push_back(std::move(row));
  }

  llvm::outs() << "mesh " << mesh->toString() << ": " << mesh->size()
               << " ranks; pipeline axis: "
               << (pipelineAxis ? mesh->axes()[*pipelineAxis].name : "none")
               << "; data axis: "
               << (dataAxis ? mesh->axes()[*dataAxis].name : "none") << "\n";
  std::vector<size_t> widths(header.size(), 0);
  for (const auto &row : rows)
    for (size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], row[i].size());
  for (const auto &row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      llvm::outs() << row[i];
      if (i + 1 < row.size())
        llvm::outs().indent(widths[i] - row[i].size() + 2);
    }
    llvm::outs() << "\n";
  }
  return 0;
}

} // namespace trellis::driver
