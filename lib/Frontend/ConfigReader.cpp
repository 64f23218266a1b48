//===- ConfigReader.cpp - Typed fields of a config.json object ------------===//
//
// The checked parse of a config.json text and the typed reading of its
// fields; every error names the field and says what was expected and what
// was found.
//
//===----------------------------------------------------------------------===//

#include "ConfigReader.h"

#include "trellis/Common/JsonShape.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

using namespace trellis;
using namespace trellis::frontend;

namespace {

/// A config.json is a flat object (rope_scaling one level down): deeper
/// nesting is refused before the recursive parser could overflow the
/// stack.
constexpr int kMaxConfigDepth = 32;

} // namespace

llvm::Error frontend::configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<llvm::json::Value>
frontend::parseConfigObject(llvm::StringRef json) {
  if (std::string why = checkJsonShape(json, kMaxConfigDepth); !why.empty())
    return configError(why);
  llvm::Expected<llvm::json::Value> root = llvm::json::parse(json);
  if (!root)
    return configError("malformed JSON: " + llvm::toString(root.takeError()));
  if (!root->getAsObject())
    return configError("expected a JSON object at the top level");
  return root;
}

llvm::Expected<int64_t> ConfigReader::integer(llvm::StringRef key,
                                              int64_t minimum) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return configError(llvm::formatv(
        "missing field \"{0}\": expected an integer >= {1}", key, minimum));
  return checkInteger(key, *value, minimum);
}

llvm::Expected<int64_t> ConfigReader::integerOr(llvm::StringRef key,
                                                int64_t fallback,
                                                int64_t minimum) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return fallback;
  return checkInteger(key, *value, minimum);
}

llvm::Expected<double> ConfigReader::numberOr(llvm::StringRef key,
                                              double fallback) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return fallback;
  std::optional<double> number = value->getAsNumber();
  if (!number || !(*number > 0) || !std::isfinite(*number))
    return configError(
        llvm::formatv("field \"{0}\": expected a positive number, found {1}",
                      key, describe(*value)));
  return *number;
}

llvm::Expected<double> ConfigReader::numberOrNone(llvm::StringRef key,
                                                  double fallback) {
  const llvm::json::Value *value = object_.get(key);
  if (value && value->kind() == llvm::json::Value::Null)
    return 0.0;
  return numberOr(key, fallback);
}

llvm::Expected<double> ConfigReader::nonNegativeOr(llvm::StringRef key,
                                                   double fallback) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return fallback;
  std::optional<double> number = value->getAsNumber();
  if (!number || !(*number >= 0) || !std::isfinite(*number))
    return configError(
        llvm::formatv("field \"{0}\": expected a number >= 0, found {1}", key,
                      describe(*value)));
  return *number;
}

namespace {

/// The list `key` of `reader`'s object, each entry read by `element` (none:
/// not of the kind `what` names); empty when absent or null.
template <typename T, typename Element>
llvm::Expected<std::vector<T>> readList(const llvm::json::Object &object,
                                        llvm::StringRef key,
                                        llvm::StringRef what, Element element) {
  const llvm::json::Value *value = object.get(key);
  std::vector<T> list;
  if (!value || value->kind() == llvm::json::Value::Null)
    return list;
  const llvm::json::Array *array = value->getAsArray();
  for (size_t i = 0; array && i < array->size(); ++i) {
    std::optional<T> entry = element((*array)[i]);
    if (!entry)
      break;
    list.push_back(*entry);
  }
  if (!array || list.size() != array->size())
    return configError(
        llvm::formatv("field \"{0}\": expected a list of {1}, found {2}", key,
                      what, ConfigReader::describe(*value)));
  return list;
}

} // namespace

llvm::Expected<std::vector<int64_t>>
ConfigReader::integers(llvm::StringRef key) {
  return readList<int64_t>(
      object_, key, "integers",
      [](const llvm::json::Value &entry) { return entry.getAsInteger(); });
}

llvm::Expected<std::vector<double>>
ConfigReader::positiveNumbers(llvm::StringRef key) {
  return readList<double>(
      object_, key, "positive numbers",
      [](const llvm::json::Value &entry) -> std::optional<double> {
        std::optional<double> number = entry.getAsNumber();
        if (!number || !std::isfinite(*number) || !(*number > 0))
          return std::nullopt;
        return number;
      });
}

llvm::Expected<bool> ConfigReader::booleanOr(llvm::StringRef key,
                                             bool fallback) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return fallback;
  std::optional<bool> flag = value->getAsBoolean();
  if (!flag)
    return configError(
        llvm::formatv("field \"{0}\": expected true or false, found {1}", key,
                      describe(*value)));
  return *flag;
}

llvm::Expected<std::string> ConfigReader::stringOr(llvm::StringRef key,
                                                   llvm::StringRef fallback) {
  const llvm::json::Value *value = object_.get(key);
  if (!value || value->kind() == llvm::json::Value::Null)
    return fallback.str();
  std::optional<llvm::StringRef> text = value->getAsString();
  if (!text)
    return configError(llvm::formatv(
        "field \"{0}\": expected a string, found {1}", key, describe(*value)));
  return text->str();
}

const llvm::json::Object *ConfigReader::object(llvm::StringRef key) {
  return object_.getObject(key);
}

llvm::Expected<std::vector<std::string>>
ConfigReader::strings(llvm::StringRef key) {
  const llvm::json::Value *value = object_.get(key);
  std::vector<std::string> list;
  if (!value || value->kind() == llvm::json::Value::Null)
    return list;
  const llvm::json::Array *array = value->getAsArray();
  for (size_t i = 0; array && i < array->size(); ++i) {
    std::optional<llvm::StringRef> text = (*array)[i].getAsString();
    if (!text)
      break;
    list.push_back(text->str());
  }
  if (!array || list.size() != array->size())
    return configError(
        llvm::formatv("field \"{0}\": expected a list of strings, found {1}",
                      key, describe(*value)));
  return list;
}

llvm::Error ConfigReader::refuseFlag(llvm::StringRef key, bool expected,
                                     llvm::StringRef meaning) {
  llvm::Expected<bool> flag = booleanOr(key, expected);
  if (!flag)
    return flag.takeError();
  if (*flag == expected)
    return llvm::Error::success();
  return configError(llvm::formatv(
      "field \"{0}\": expected {1} ({2}), found {3}", key,
      expected ? "true" : "false", meaning, *flag ? "true" : "false"));
}

std::string ConfigReader::describe(const llvm::json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

llvm::Expected<int64_t>
ConfigReader::checkInteger(llvm::StringRef key, const llvm::json::Value &value,
                           int64_t minimum) {
  std::optional<int64_t> number = value.getAsInteger();
  if (!number || *number < minimum)
    return configError(
        llvm::formatv("field \"{0}\": expected an integer >= {1}, found {2}",
                      key, minimum, describe(value)));
  return *number;
}

llvm::Error
frontend::checkArchitectures(ConfigReader &reader, llvm::StringRef type,
                             llvm::ArrayRef<llvm::StringRef> known) {
  std::vector<std::string> architectures;
  TRY_ASSIGN(architectures, reader.strings("architectures"));
  for (const std::string &architecture : architectures)
    if (!llvm::is_contained(known, architecture))
      return configError(llvm::formatv(
          "field \"architectures\": model_type \"{0}\" builds {1}, found "
          "\"{2}\" (another model's layers read as {0}'s)",
          type, llvm::join(known, " or "), architecture));
  return llvm::Error::success();
}
