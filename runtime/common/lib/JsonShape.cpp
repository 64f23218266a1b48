//===- JsonShape.cpp - Nesting and duplicate keys of JSON text ------------===//

#include "trellis/Common/JsonShape.h"

#include <set>
#include <vector>

namespace trellis {

std::string checkJsonShape(std::string_view text, int maxDepth) {
  // One frame per open object or array: an object's keys so far, and
  // whether its next string is a key.
  struct Frame {
    bool object = false;
    bool expectingKey = false;
    std::set<std::string> keys;
  };
  std::vector<Frame> frames;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = i + 1, end = start;
      while (end < text.size() && text[end] != '"')
        end += text[end] == '\\' ? 2 : 1;
      if (end >= text.size())
        return ""; // unterminated: the parser says so
      if (!frames.empty() && frames.back().object &&
          frames.back().expectingKey) {
        std::string key(text.substr(start, end - start));
        if (!frames.back().keys.insert(key).second)
          return "field \"" + key +
                 "\" appears twice in one object (again at "
                 "byte " +
                 std::to_string(i) + "): expected each field once";
        frames.back().expectingKey = false;
      }
      i = end;
    } else if (c == '{' || c == '[') {
      if (static_cast<int>(frames.size()) >= maxDepth)
        return "objects and arrays nest deeper than " +
               std::to_string(maxDepth) + " levels (at byte " +
               std::to_string(i) + ")";
      frames.push_back({c == '{', c == '{', {}});
    } else if (c == '}' || c == ']') {
      if (frames.empty())
        return "";
      frames.pop_back();
    } else if (c == ',' && !frames.empty() && frames.back().object) {
      frames.back().expectingKey = true;
    }
  }
  return "";
}

} // namespace trellis
