//===- ConfigReader.h - Typed fields of a config.json object ----*- C++ -*-===//
//
// What the readers of a Hugging Face `config.json` share: the checked parse
// of its text, the typed field accessors whose errors name the field and say
// what was expected and what was found, and the architectures check.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_FRONTEND_CONFIGREADER_H
#define TRELLIS_LIB_FRONTEND_CONFIGREADER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::frontend {

/// An error whose text is `message`.
llvm::Error configError(const llvm::Twine &message);

/// The JSON value of a config.json text, an object. Text nested deeper than
/// a config is, or repeating a key, is refused before the recursive parser
/// reads it; then malformed JSON and a top level that is not an object.
llvm::Expected<llvm::json::Value> parseConfigObject(llvm::StringRef json);

/// Reads typed fields of a config object; every error names the field.
class ConfigReader {
public:
  explicit ConfigReader(const llvm::json::Object &object) : object_(object) {}

  /// A required integer >= `minimum`.
  llvm::Expected<int64_t> integer(llvm::StringRef key, int64_t minimum = 1);

  /// An optional integer >= `minimum`; `fallback` when absent or null.
  llvm::Expected<int64_t> integerOr(llvm::StringRef key, int64_t fallback,
                                    int64_t minimum = 1);

  /// An optional positive number; `fallback` when absent or null.
  llvm::Expected<double> numberOr(llvm::StringRef key, double fallback);

  /// An optional positive number: `fallback` when absent, 0 when null
  /// (transformers' "none" for a soft cap).
  llvm::Expected<double> numberOrNone(llvm::StringRef key, double fallback);

  /// An optional number >= 0; `fallback` when absent or null.
  llvm::Expected<double> nonNegativeOr(llvm::StringRef key, double fallback);

  /// An optional list of integers (empty when absent or null).
  llvm::Expected<std::vector<int64_t>> integers(llvm::StringRef key);

  /// An optional list of finite positive numbers (empty when absent or
  /// null).
  llvm::Expected<std::vector<double>> positiveNumbers(llvm::StringRef key);

  /// An optional boolean; `fallback` when absent or null.
  llvm::Expected<bool> booleanOr(llvm::StringRef key, bool fallback);

  /// An optional string; `fallback` when absent.
  llvm::Expected<std::string> stringOr(llvm::StringRef key,
                                       llvm::StringRef fallback);

  /// The object `key` names; null when absent or not an object.
  const llvm::json::Object *object(llvm::StringRef key);

  /// An optional list of strings (empty when absent or null).
  llvm::Expected<std::vector<std::string>> strings(llvm::StringRef key);

  /// Refuses a flag set to what Trellis does not build: `expected` is the
  /// value it builds, `meaning` what the other value would add.
  llvm::Error refuseFlag(llvm::StringRef key, bool expected,
                         llvm::StringRef meaning);

  /// `value` as JSON text for a message, cut after 40 characters.
  static std::string describe(const llvm::json::Value &value);

private:
  llvm::Expected<int64_t> checkInteger(llvm::StringRef key,
                                       const llvm::json::Value &value,
                                       int64_t minimum);

  const llvm::json::Object &object_;
};

/// Refuses a config whose `architectures` name a model other than
/// `model_type`'s (a Qwen2 config relabelled llama would lose its biases).
llvm::Error checkArchitectures(ConfigReader &reader, llvm::StringRef type,
                               llvm::ArrayRef<llvm::StringRef> known);

} // namespace trellis::frontend

/// Assigns `expr`'s value to `target`, or returns its error from the
/// enclosing function.
#define TRY_ASSIGN(target, expr)                                               \
  do {                                                                         \
    auto valueOrError = (expr);                                                \
    if (!valueOrError)                                                         \
      return valueOrError.takeError();                                         \
    target = *valueOrError;                                                    \
  } while (false)

#endif // TRELLIS_LIB_FRONTEND_CONFIGREADER_H
