//===- Mesh.h - Device mesh and process-group arithmetic --------*- C++ -*-===//
//
// A device mesh is a list of named axes with sizes, major to minor. The order
// defines rank numbering: for `dp=2,pp=2,tp=4`, rank = dp*8 + pp*4 + tp.
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

/// One named mesh axis.
struct MeshAxis {
  std::string name;
  int64_t size = 1;

  bool operator==(const MeshAxis &other) const {
    return name == other.name && size == other.size;
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
  /// Builds a mesh from axes. Fails on an empty list, an empty or duplicate
  /// name, a size below 1, or a total size that overflows int64.
  static std::optional<Mesh> create(std::vector<MeshAxis> axes,
                                    MeshError *error);

  /// Parses `name=size[,name=size]*` (spaces around tokens are allowed).
  /// Names are identifiers: a letter or '_' followed by letters, digits, '_'.
  static std::optional<Mesh> parse(std::string_view text, MeshError *error);

  const std::vector<MeshAxis> &axes() const { return axes_; }
  size_t numAxes() const { return axes_.size(); }
  int64_t size() const { return size_; }

  /// Index of the axis called `name`, or nullopt if there is none.
  std::optional<size_t> axisIndex(std::string_view name) const;

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

  /// `dp=2,pp=2,tp=4`: the form `parse` accepts.
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
