//===- Mesh.h - Device mesh and process-group arithmetic --------*- C++ -*-===//
//
// A device mesh is a list of named axes with sizes and roles, major to minor.
// The order defines rank numbering: for `dp=2,pp=2,tp=4`, rank = dp*8 + pp*4
// + tp. A role says what an axis is for (the batch, a layer's weights, the
// pipeline's stages, the sequence, the experts); the names dp, tp, pp, cp
// and ep (and torchtitan's dp_replicate and dp_shard) imply theirs, any
// other name states it: `replica:data=2,shard:data=4,model:tensor=2`.
// Shared by the compiler and the runtime; depends on the C++ standard library
// only and never throws, so code built with -fno-exceptions can use it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_MESH_H
#define TRELLIS_COMMON_MESH_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trellis {

/// What a mesh axis splits. The compiler finds axes by role, never by name.
enum class AxisRole : uint8_t {
  /// No role: the name implies none and none was given. Fine for process
  /// groups; the compiler asks for one.
  Unassigned,
  /// The batch (data parallelism, and ZeRO's shards).
  Data,
  /// Layers' weights and heads (Megatron tensor parallelism).
  Tensor,
  /// The pipeline's stages.
  Pipeline,
  /// The sequence (context parallelism).
  Context,
  /// Experts (expert parallelism); the batch splits over it too.
  Expert,
};

/// `data`, `tensor`, ... (`unassigned` for none).
std::string_view axisRoleName(AxisRole role);
/// The role called `name` (`data`, `tensor`, `pipeline`, `context`,
/// `expert`), or nullopt.
std::optional<AxisRole> parseAxisRole(std::string_view name);
/// The role a well-known axis name implies: dp, dp_replicate, dp_shard
/// (data), tp (tensor), pp (pipeline), cp (context), ep (expert); others
/// none.
AxisRole impliedAxisRole(std::string_view name);
/// True for the roles the batch splits over: data and expert.
bool splitsBatch(AxisRole role);

/// One named mesh axis.
struct MeshAxis {
  std::string name;
  int64_t size = 1;
  /// Unassigned here means "the role the name implies" (Mesh::create fills
  /// it in).
  AxisRole role = AxisRole::Unassigned;

  bool operator==(const MeshAxis &other) const {
    return name == other.name && size == other.size && role == other.role;
  }
};

/// Why a mesh could not be built. `column` is 1-based into the parsed text, or
/// 0 when the error is not tied to a position (e.g. a world-size mismatch).
struct MeshError {
  size_t column = 0;
  std::string message;
};

/// A device mesh: axes in major-to-minor order. Ranks run from 0 to size()-1.
class Mesh {
public:
  /// Builds a mesh from axes; an axis without a role takes the one its name
  /// implies. Fails on an empty list, an empty or duplicate name, a size
  /// below 1, or a total size that overflows int64.
  static std::optional<Mesh> create(std::vector<MeshAxis> axes,
                                    MeshError *error);

  /// Parses `name[:role]=size[,name[:role]=size]*` (spaces around tokens are
  /// allowed). Names are identifiers: a letter or '_' followed by letters,
  /// digits, '_'; a role is one of parseAxisRole's names.
  static std::optional<Mesh> parse(std::string_view text, MeshError *error);

  const std::vector<MeshAxis> &axes() const { return axes_; }
  size_t numAxes() const { return axes_.size(); }
  int64_t size() const { return size_; }

  /// Index of the axis called `name`, or nullopt if there is none.
  std::optional<size_t> axisIndex(std::string_view name) const;

  /// The indices of the axes with `role`, major to minor.
  std::vector<size_t> axesWithRole(AxisRole role) const;

  /// The ranks in a group along every axis with `role` (1 when none).
  int64_t roleSize(AxisRole role) const {
    return groupSize(axesWithRole(role));
  }

  /// The indices of the axes the batch splits over (data and expert roles),
  /// major to minor.
  std::vector<size_t> batchAxes() const;

  /// Coordinates of `rank`, one per axis. Precondition: 0 <= rank < size().
  std::vector<int64_t> coordinates(int64_t rank) const;

  /// Rank at `coordinates`. Precondition: one in-range coordinate per axis.
  int64_t rank(const std::vector<int64_t> &coordinates) const;

  /// Ranks that differ from `rank` only along `axisIndices`, ordered by their
  /// position in the group: the first listed axis is the most significant.
  /// The position of `rank` itself is `groupPosition(rank, axisIndices)`.
  /// Preconditions: valid rank, valid distinct axis indices.
  std::vector<int64_t> group(int64_t rank,
                             const std::vector<size_t> &axisIndices) const;

  /// Position of `rank` within its group along `axisIndices` (same ordering
  /// as `group`).
  int64_t groupPosition(int64_t rank,
                        const std::vector<size_t> &axisIndices) const;

  /// Number of ranks in a group along `axisIndices`.
  int64_t groupSize(const std::vector<size_t> &axisIndices) const;

  /// Every group along `axisIndices`, ordered by their smallest rank. The
  /// groups partition the mesh.
  std::vector<std::vector<int64_t>>
  allGroups(const std::vector<size_t> &axisIndices) const;

  /// The pipeline stage of `rank` when `pipelineAxis` is the pipeline axis:
  /// its coordinate along that axis.
  int64_t stage(int64_t rank, size_t pipelineAxis) const {
    return coordinates(rank)[pipelineAxis];
  }

  /// Checks that the mesh has exactly `worldSize` ranks.
  bool matchesWorldSize(int64_t worldSize, MeshError *error) const;

  /// `dp=2,pp=2,tp=4`: the form `parse` accepts; a role is written only
  /// where the name does not imply it (`replica:data=2`).
  std::string toString() const;

  bool operator==(const Mesh &other) const { return axes_ == other.axes_; }

private:
  explicit Mesh(std::vector<MeshAxis> axes, int64_t size)
      : axes_(std::move(axes)), size_(size) {}

  std::vector<MeshAxis> axes_;
  int64_t size_ = 1;
};

/// Prints ranks as `{0,1,2,3}`.
std::string formatRankSet(const std::vector<int64_t> &ranks);

} // namespace trellis

#endif // TRELLIS_COMMON_MESH_H
