//===- Mesh.cpp - Device mesh and process-group arithmetic ----------------===//

#include "trellis/Common/Mesh.h"
#include "trellis/Common/Utf8.h"

#include <cctype>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

namespace trellis {

namespace {

bool fail(MeshError *error, size_t column, std::string message) {
  if (error) {
    error->column = column;
    error->message = std::move(message);
  }
  return false;
}

bool isIdentifierStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

bool isIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/// A cursor over mesh text that tracks 1-based columns.
class MeshLexer {
public:
  explicit MeshLexer(std::string_view text) : text_(text) {}

  void skipSpaces() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return atEnd() ? '\0' : text_[pos_]; }
  size_t column() const { return pos_ + 1; }
  void advance() { ++pos_; }

  std::string_view takeWhile(bool (*predicate)(char)) {
    size_t begin = pos_;
    while (pos_ < text_.size() && predicate(text_[pos_]))
      ++pos_;
    return text_.substr(begin, pos_ - begin);
  }

  /// A human-readable description of the next token for diagnostics.
  /// The next character in quotes: a whole UTF-8 character (with a word
  /// on what names may hold), or a byte that is none as 0xNN.
  std::string describeNext() const {
    if (atEnd())
      return "end of input";
    auto byte = static_cast<unsigned char>(text_[pos_]);
    if (byte < 0x80)
      return std::string("'") + text_[pos_] + "'";
    size_t length = utf8CharacterLength(text_, pos_);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", byte);
    return (length ? "'" + std::string(text_.substr(pos_, length)) + "'"
                   : std::string("byte ") + hex) +
           " (mesh axis names and roles are ASCII letters, digits and '_')";
  }

private:
  std::string_view text_;
  size_t pos_ = 0;
};

bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

/// The roles by name, in the order messages list them.
constexpr std::pair<std::string_view, AxisRole> kRoleNames[] = {
    {"data", AxisRole::Data},         {"tensor", AxisRole::Tensor},
    {"pipeline", AxisRole::Pipeline}, {"context", AxisRole::Context},
    {"expert", AxisRole::Expert},
};

} // namespace

std::string_view axisRoleName(AxisRole role) {
  for (const auto &[name, named] : kRoleNames)
    if (named == role)
      return name;
  return "unassigned";
}

std::optional<AxisRole> parseAxisRole(std::string_view name) {
  for (const auto &[roleName, role] : kRoleNames)
    if (roleName == name)
      return role;
  return std::nullopt;
}

AxisRole impliedAxisRole(std::string_view name) {
  if (name == "dp" || name == "dp_replicate" || name == "dp_shard")
    return AxisRole::Data;
  if (name == "tp")
    return AxisRole::Tensor;
  if (name == "pp")
    return AxisRole::Pipeline;
  if (name == "cp")
    return AxisRole::Context;
  if (name == "ep")
    return AxisRole::Expert;
  return AxisRole::Unassigned;
}

bool splitsBatch(AxisRole role) {
  return role == AxisRole::Data || role == AxisRole::Expert;
}

std::optional<Mesh> Mesh::create(std::vector<MeshAxis> axes, MeshError *error) {
  if (axes.empty()) {
    fail(error, 0, "expected at least one mesh axis, found none");
    return std::nullopt;
  }
  std::set<std::string> seen;
  int64_t size = 1;
  for (const MeshAxis &axis : axes) {
    if (axis.name.empty()) {
      fail(error, 0, "expected a non-empty mesh axis name");
      return std::nullopt;
    }
    if (!seen.insert(axis.name).second) {
      fail(error, 0, "mesh axis \"" + axis.name + "\" is declared twice");
      return std::nullopt;
    }
    if (axis.size < 1) {
      fail(error, 0,
           "expected mesh axis \"" + axis.name +
               "\" to have a size >= 1, found " + std::to_string(axis.size));
      return std::nullopt;
    }
    if (size > std::numeric_limits<int64_t>::max() / axis.size) {
      fail(error, 0, "mesh size overflows a 64-bit integer");
      return std::nullopt;
    }
    size *= axis.size;
  }
  for (MeshAxis &axis : axes)
    if (axis.role == AxisRole::Unassigned)
      axis.role = impliedAxisRole(axis.name);
  return Mesh(std::move(axes), size);
}

std::optional<Mesh> Mesh::parse(std::string_view text, MeshError *error) {
  MeshLexer lexer(text);
  std::vector<MeshAxis> axes;
  std::set<std::string> seen;
  while (true) {
    lexer.skipSpaces();
    size_t nameColumn = lexer.column();
    if (!isIdentifierStart(lexer.peek())) {
      fail(error, nameColumn,
           "expected a mesh axis name, found " + lexer.describeNext());
      return std::nullopt;
    }
    std::string name(lexer.takeWhile(isIdentifierChar));
    if (!seen.insert(name).second) {
      fail(error, nameColumn, "mesh axis \"" + name + "\" is declared twice");
      return std::nullopt;
    }
    lexer.skipSpaces();
    AxisRole role = AxisRole::Unassigned;
    if (lexer.peek() == ':') {
      lexer.advance();
      lexer.skipSpaces();
      size_t roleColumn = lexer.column();
      std::string_view roleName = lexer.takeWhile(isIdentifierChar);
      std::optional<AxisRole> parsed = parseAxisRole(roleName);
      if (!parsed) {
        std::string found = roleName.empty()
                                ? lexer.describeNext()
                                : "'" + std::string(roleName) + "'";
        fail(error, roleColumn,
             "expected a role for mesh axis \"" + name +
                 "\" (data, tensor, pipeline, context or expert), found " +
                 found);
        return std::nullopt;
      }
      role = *parsed;
      lexer.skipSpaces();
    }
    if (lexer.peek() != '=') {
      fail(error, lexer.column(),
           "expected '=' after mesh axis \"" + name + "\", found " +
               lexer.describeNext());
      return std::nullopt;
    }
    lexer.advance();
    lexer.skipSpaces();
    size_t sizeColumn = lexer.column();
    bool negative = false;
    if (lexer.peek() == '-') {
      negative = true;
      lexer.advance();
    }
    std::string_view digits = lexer.takeWhile(isDigit);
    if (digits.empty()) {
      fail(error, sizeColumn,
           "expected an integer size for mesh axis \"" + name + "\", found " +
               lexer.describeNext());
      return std::nullopt;
    }
    if (digits.size() > 18) {
      fail(error, sizeColumn,
           "size of mesh axis \"" + name +
               "\" is too large: " + std::string(digits));
      return std::nullopt;
    }
    int64_t size = std::stoll(std::string(digits));
    if (negative)
      size = -size;
    if (size < 1) {
      fail(error, sizeColumn,
           "expected mesh axis \"" + name + "\" to have a size >= 1, found " +
               std::to_string(size));
      return std::nullopt;
    }
    axes.push_back({std::move(name), size, role});
    lexer.skipSpaces();
    if (lexer.atEnd())
      break;
    if (lexer.peek() != ',') {
      fail(error, lexer.column(),
           "expected ',' or end of input after a mesh axis, found " +
               lexer.describeNext());
      return std::nullopt;
    }
    lexer.advance();
  }
  std::optional<Mesh> mesh = create(std::move(axes), error);
  if (!mesh && error)
    error->column = 1;
  return mesh;
}

std::optional<size_t> Mesh::axisIndex(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name)
      return i;
  return std::nullopt;
}

std::vector<size_t> Mesh::axesWithRole(AxisRole role) const {
  std::vector<size_t> indices;
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].role == role)
      indices.push_back(i);
  return indices;
}

std::vector<size_t> Mesh::batchAxes() const {
  std::vector<size_t> indices;
  for (size_t i = 0; i < axes_.size(); ++i)
    if (splitsBatch(axes_[i].role))
      indices.push_back(i);
  return indices;
}

std::vector<int64_t> Mesh::coordinates(int64_t rank) const {
  std::vector<int64_t> coords(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    coords[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return coords;
}

int64_t Mesh::rank(const std::vector<int64_t> &coordinates) const {
  int64_t rank = 0;
  for (size_t i = 0; i < axes_.size(); ++i)
    rank = rank * axes_[i].size + coordinates[i];
  return rank;
}

int64_t Mesh::groupSize(const std::vector<size_t> &axisIndices) const {
  int64_t size = 1;
  for (size_t axis : axisIndices)
    size *= axes_[axis].size;
  return size;
}

std::vector<int64_t> Mesh::group(int64_t rank,
                                 const std::vector<size_t> &axisIndices) const {
  std::vector<int64_t> coords = coordinates(rank);
  int64_t count = groupSize(axisIndices);
  std::vector<int64_t> members;
  members.reserve(count);
  for (int64_t position = 0; position < count; ++position) {
    // Decode `position` into coordinates along the listed axes, the last
    // listed axis varying fastest.
    int64_t rest = position;
    for (size_t i = axisIndices.size(); i-- > 0;) {
      size_t axis = axisIndices[i];
      coords[axis] = rest % axes_[axis].size;
      rest /= axes_[axis].size;
    }
    members.push_back(this->rank(coords));
  }
  return members;
}

int64_t Mesh::groupPosition(int64_t rank,
                            const std::vector<size_t> &axisIndices) const {
  std::vector<int64_t> coords = coordinates(rank);
  int64_t position = 0;
  for (size_t axis : axisIndices)
    position = position * axes_[axis].size + coords[axis];
  return position;
}

std::vector<std::vector<int64_t>>
Mesh::allGroups(const std::vector<size_t> &axisIndices) const {
  std::vector<std::vector<int64_t>> groups;
  std::vector<bool> covered(size_, false);
  for (int64_t rank = 0; rank < size_; ++rank) {
    if (covered[rank])
      continue;
    std::vector<int64_t> members = group(rank, axisIndices);
    for (int64_t member : members)
      covered[member] = true;
    groups.push_back(std::move(members));
  }
  return groups;
}

bool Mesh::matchesWorldSize(int64_t worldSize, MeshError *error) const {
  if (worldSize == size_)
    return true;
  return fail(error, 0,
              "mesh " + toString() + " has " + std::to_string(size_) +
                  " ranks but the world size is " + std::to_string(worldSize));
}

std::string Mesh::toString() const {
  std::string text;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (i)
      text += ',';
    text += axes_[i].name;
    if (axes_[i].role != impliedAxisRole(axes_[i].name))
      text += ":" + std::string(axisRoleName(axes_[i].role));
    text += "=" + std::to_string(axes_[i].size);
  }
  return text;
}

std::string formatRankSet(const std::vector<int64_t> &ranks) {
  std::string text = "{";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i)
      text += ',';
    text += std::to_string(ranks[i]);
  }
  return text + "}";
}

} // namespace trellis
