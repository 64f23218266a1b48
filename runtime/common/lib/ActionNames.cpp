//===- ActionNames.cpp - Names of a pipeline stage's action programs -------===//

#include "trellis/Common/ActionNames.h"

namespace trellis {

namespace {

const char *kindName(ActionKind kind) {
  switch (kind) {
  case ActionKind::Forward:
    return "forward";
  case ActionKind::Backward:
    return "backward";
  case ActionKind::Weight:
    return "weight";
  case ActionKind::Step:
    break;
  }
  return "step";
}

/// Reads up to 7 digits at `at` into `value`, advancing `at`.
bool readNumber(const std::string &text, size_t &at, int64_t &value) {
  size_t end = text.find_first_not_of("0123456789", at);
  if (end == std::string::npos)
    end = text.size();
  if (end == at || end - at > 7)
    return false;
  value = std::stoll(text.substr(at, end - at));
  at = end;
  return true;
}

} // namespace

std::string programName(const ActionProgramName &program) {
  if (program.kind == ActionKind::Step)
    return "step";
  return std::string(kindName(program.kind)) +
         (program.receives ? "_receive" : "") + ".c" +
         std::to_string(program.chunk);
}

std::string actionName(const ActionProgramName &program, int64_t microBatch,
                       bool chunked) {
  if (program.kind == ActionKind::Step)
    return "step";
  std::string text = program.receives ? "R" : "";
  text += program.kind == ActionKind::Forward    ? "F"
          : program.kind == ActionKind::Backward ? "B"
                                                 : "W";
  text += std::to_string(microBatch);
  if (chunked)
    text += ".c" + std::to_string(program.chunk);
  return text;
}

std::optional<ActionProgramName> parseProgramName(const std::string &name) {
  ActionProgramName program;
  if (name == "step")
    return program;
  size_t dot = name.rfind(".c");
  if (dot == std::string::npos)
    return std::nullopt;
  size_t at = dot + 2;
  if (!readNumber(name, at, program.chunk) || at != name.size())
    return std::nullopt;
  std::string base = name.substr(0, dot);
  const std::string suffix = "_receive";
  if (base.size() > suffix.size() &&
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    program.receives = true;
    base.resize(base.size() - suffix.size());
  }
  if (base == "forward")
    program.kind = ActionKind::Forward;
  else if (base == "backward")
    program.kind = ActionKind::Backward;
  else if (base == "weight")
    program.kind = ActionKind::Weight;
  else
    return std::nullopt;
  return program;
}

std::optional<ScheduledActionName> parseActionName(const std::string &text) {
  ScheduledActionName entry;
  if (text == "step")
    return entry;
  size_t at = 0;
  if (at < text.size() && text[at] == 'R') {
    entry.program.receives = true;
    ++at;
  }
  if (at >= text.size())
    return std::nullopt;
  switch (text[at++]) {
  case 'F':
    entry.program.kind = ActionKind::Forward;
    break;
  case 'B':
    entry.program.kind = ActionKind::Backward;
    break;
  case 'W':
    entry.program.kind = ActionKind::Weight;
    break;
  default:
    return std::nullopt;
  }
  if (!readNumber(text, at, entry.microBatch))
    return std::nullopt;
  if (at < text.size()) {
    if (text.compare(at, 2, ".c") != 0)
      return std::nullopt;
    at += 2;
    if (!readNumber(text, at, entry.program.chunk) || at != text.size())
      return std::nullopt;
  }
  return entry;
}

} // namespace trellis
