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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trellis {

/// The type of an option's value: each option takes exactly one.
enum class OptionType { Int, Double, String, Bool };

/// A value of one of the types (the field of its type is set), or none:
/// an optional option not given (`unset`), which only a row's `get` gives
/// and its `set` takes back.
struct OptionValue {
  int64_t integer = 0;
  double number = 0;
  std::string text;
  bool flag = false;
  bool unset = false;
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
  /// The words a String option takes, comma-separated (`gpipe,1f1b`);
  /// empty: any text.
  const char *choices = "";
};

/// `value` of `type` as the help shows a default: integers and numbers as
/// written (%g), a string as it is, a bool as 1 or 0; unset: empty.
inline std::string formatOptionValue(OptionType type,
                                     const OptionValue &value) {
  if (value.unset)
    return "";
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

/// Whether `a` and `b`, of `type`, are the same value (both unset, or the
/// field of `type` equal).
inline bool sameOptionValue(OptionType type, const OptionValue &a,
                            const OptionValue &b) {
  if (a.unset || b.unset)
    return a.unset == b.unset;
  switch (type) {
  case OptionType::Int:
    return a.integer == b.integer;
  case OptionType::Double:
    return a.number == b.number;
  case OptionType::String:
    return a.text == b.text;
  case OptionType::Bool:
    return a.flag == b.flag;
  }
  return false;
}

/// `words` (comma-separated) as a message lists them: `a, b or c`.
inline std::string listChoices(std::string_view words) {
  std::string list;
  size_t start = 0;
  while (start <= words.size()) {
    size_t end = words.find(',', start);
    if (end == std::string_view::npos)
      end = words.size();
    bool last = end == words.size();
    if (!list.empty())
      list += last ? " or " : ", ";
    list += words.substr(start, end - start);
    start = end + 1;
  }
  return list;
}

/// What is wrong with `value` for `row` ("" when nothing is): a word not
/// among its choices ("expected a, b or c, found 'd'"), else its check's
/// answer.
template <typename Options>
std::string checkOptionValue(const OptionRow<Options> &row,
                             const OptionValue &value) {
  if (value.unset)
    return "";
  std::string_view choices = row.choices;
  if (!choices.empty()) {
    bool found = false;
    for (size_t start = 0; start <= choices.size() && !found;) {
      size_t end = choices.find(',', start);
      if (end == std::string_view::npos)
        end = choices.size();
      found = choices.substr(start, end - start) == value.text;
      start = end + 1;
    }
    if (!found)
      return "expected " + listChoices(choices) + ", found '" + value.text +
             "'";
  }
  return row.check ? row.check(value) : "";
}

/// One option a command line gives: its row and value.
template <typename Options> struct OptionAssignment {
  const OptionRow<Options> *row;
  OptionValue value;
};

/// The rows whose values in `options` differ from those in `base`, in
/// the table's order: what a command line must say to make `options` of
/// `base`. Rows without `get` are left out.
template <typename Options>
std::vector<OptionAssignment<Options>>
changedOptions(const std::vector<OptionRow<Options>> &rows,
               const Options &options, const Options &base) {
  std::vector<OptionAssignment<Options>> changed;
  for (const OptionRow<Options> &row : rows) {
    if (!row.get)
      continue;
    OptionValue value = row.get(options);
    if (!sameOptionValue(row.type, value, row.get(base)))
      changed.push_back({&row, std::move(value)});
  }
  return changed;
}

/// `assignments` as command-line flags: `--name value`, a bool `--name` or
/// `--name=false`, an unset value left out; separated by spaces.
template <typename Options>
std::string
formatCommandLine(const std::vector<OptionAssignment<Options>> &assignments) {
  std::string line;
  for (const OptionAssignment<Options> &assignment : assignments) {
    if (assignment.value.unset)
      continue;
    line += line.empty() ? "--" : " --";
    line += assignment.row->name;
    if (assignment.row->type == OptionType::Bool)
      line += assignment.value.flag ? "" : "=false";
    else
      line += " " + formatOptionValue(assignment.row->type, assignment.value);
  }
  return line;
}

namespace detail {
template <typename T> struct OptionTypeOf;
template <> struct OptionTypeOf<int64_t> {
  static constexpr OptionType type = OptionType::Int;
  static int64_t read(const OptionValue &v) { return v.integer; }
  static void write(OptionValue &v, int64_t x) { v.integer = x; }
};
template <> struct OptionTypeOf<double> {
  static constexpr OptionType type = OptionType::Double;
  static double read(const OptionValue &v) { return v.number; }
  static void write(OptionValue &v, double x) { v.number = x; }
};
template <> struct OptionTypeOf<std::string> {
  static constexpr OptionType type = OptionType::String;
  static std::string read(const OptionValue &v) { return v.text; }
  static void write(OptionValue &v, const std::string &x) { v.text = x; }
};
template <> struct OptionTypeOf<bool> {
  static constexpr OptionType type = OptionType::Bool;
  static bool read(const OptionValue &v) { return v.flag; }
  static void write(OptionValue &v, bool x) { v.flag = x; }
};
template <typename T> struct OptionTypeOf<std::optional<T>> {
  static constexpr OptionType type = OptionTypeOf<T>::type;
  static std::optional<T> read(const OptionValue &v) {
    if (v.unset)
      return std::nullopt;
    return OptionTypeOf<T>::read(v);
  }
  static void write(OptionValue &v, const std::optional<T> &x) {
    if (x)
      OptionTypeOf<T>::write(v, *x);
    else
      v.unset = true;
  }
};
template <typename Class, typename Field> Field fieldTypeOf(Field Class::*);
template <typename Class, typename Field> Class classTypeOf(Field Class::*);
} // namespace detail

/// A row that reads and writes the field `Member` of `Options` (an
/// int64_t, double, std::string, bool, or an optional of one, which an
/// unset value clears): its type, set and get come from the field.
template <auto Member, typename Options = decltype(detail::classTypeOf(Member))>
OptionRow<Options> fieldOption(const char *name, const char *group,
                               const char *help, const char *valueName = "",
                               const char *choices = "") {
  using Field = decltype(detail::fieldTypeOf(Member));
  using Traits = detail::OptionTypeOf<Field>;
  OptionRow<Options> row{name,
                         Traits::type,
                         [](Options &options, const OptionValue &value) {
                           options.*Member = Traits::read(value);
                         },
                         group,
                         help,
                         valueName};
  row.get = [](const Options &options) {
    OptionValue value;
    Traits::write(value, options.*Member);
    return value;
  };
  row.choices = choices;
  return row;
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
