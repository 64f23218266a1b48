//===- OptionTable.h - Typed options declared once --------------*- C++ -*-===//
//
// An option table declares each option of a command once: its name (the
// command line's flag, the C API's key, Python's keyword with '_' for
// '-'), its type, its help, and how it sets the options struct. The
// command line builds its flags from the table, the C API's typed setters
// look keys up in it, and Python asks the C API for it; no option is
// declared twice. Depends on the C++ standard library only.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_OPTIONTABLE_H
#define TRELLIS_COMMON_OPTIONTABLE_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace trellis {

/// The type of an option's value: each option takes exactly one.
enum class OptionType { Int, Double, String, Bool };

/// A value of one of the types (the field of its type is set).
struct OptionValue {
  int64_t integer = 0;
  double number = 0;
  std::string text;
  bool flag = false;
};

/// `an integer`, `a number`, `a string`, `a bool`: for messages.
inline const char *optionTypeName(OptionType type) {
  switch (type) {
  case OptionType::Int:
    return "an integer";
  case OptionType::Double:
    return "a number";
  case OptionType::String:
    return "a string";
  case OptionType::Bool:
    return "a bool";
  }
  return "";
}

/// `int`, `float`, `str`, `bool`: the type's name in Python.
inline const char *optionTypeKeyword(OptionType type) {
  switch (type) {
  case OptionType::Int:
    return "int";
  case OptionType::Double:
    return "float";
  case OptionType::String:
    return "str";
  case OptionType::Bool:
    return "bool";
  }
  return "";
}

/// Where an option may be given (OptionRow::scopes, a bit set).
enum OptionScope : unsigned {
  /// A command-line flag.
  kOptionOnCommandLine = 1,
  /// A key of the C API's typed setters (and so a Python keyword).
  kOptionAsKey = 2,
};

/// One option of `Options`.
template <typename Options> struct OptionRow {
  /// The flag without dashes (`microbatches`, `adam-eps`).
  const char *name;
  OptionType type;
  /// Sets the option in `Options` from a value of `type`.
  void (*set)(Options &, const OptionValue &);
  /// What the help lists it under (`Parallelism`; empty: hidden from the
  /// help), its help, and how the help shows its value (`dp=2,tp=2`;
  /// empty: the type's name).
  const char *group = "";
  const char *help = "";
  const char *valueName = "";
  /// Reads the option back from `Options` (the help's default; a table
  /// that prints what it holds); null: the help shows no default.
  OptionValue (*get)(const Options &) = nullptr;
  /// What is wrong with a value before it is set ("" when nothing is),
  /// said as "expected ..., found ..."; null: every value of the type.
  std::string (*check)(const OptionValue &) = nullptr;
  unsigned scopes = kOptionOnCommandLine;
  /// A Bool option given without a value (`--profile`).
  bool switchOnly = false;
};

/// `value` of `type` as the help shows a default: integers and numbers as
/// written (%g), a string as it is, a bool as 1 or 0.
inline std::string formatOptionValue(OptionType type,
                                     const OptionValue &value) {
  switch (type) {
  case OptionType::Int:
    return std::to_string(value.integer);
  case OptionType::Double: {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value.number);
    return text;
  }
  case OptionType::String:
    return value.text;
  case OptionType::Bool:
    return value.flag ? "1" : "0";
  }
  return "";
}

/// The row called `name`, or null.
template <typename Options>
const OptionRow<Options> *
findOption(const std::vector<OptionRow<Options>> &rows, std::string_view name) {
  for (const OptionRow<Options> &row : rows)
    if (name == row.name)
      return &row;
  return nullptr;
}

/// The rows' names, sorted and comma-separated: for messages.
template <typename Options>
std::string listOptionNames(const std::vector<OptionRow<Options>> &rows) {
  std::vector<std::string> names;
  for (const OptionRow<Options> &row : rows)
    names.push_back(row.name);
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string &name : names)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

} // namespace trellis

#endif // TRELLIS_COMMON_OPTIONTABLE_H
