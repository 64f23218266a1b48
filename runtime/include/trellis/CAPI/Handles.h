//===- Handles.h - C API handles over C++ objects ---------------*- C++ -*-===//
//
// The C API's implementation helpers: status objects from messages, and
// tables from handle ids to the objects they stand for, so that a handle
// that was destroyed (or never created) is refused with a message instead
// of touching freed memory. Ids are unique in the process, across types.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_CAPI_HANDLES_H
#define TRELLIS_CAPI_HANDLES_H

#include "trellis-c/Support.h"
#include "trellis/Common/OptionTable.h"

#include <cstdint>
#include <exception>
#include <map>
#include <new>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace trellis::capi {

/// A failed status carrying `message`.
TrellisStatus errorStatus(const std::string &message);

/// A fresh handle id (never 0, never reused in the process).
uint64_t nextHandleId();

/// Objects of one handle type, by id.
template <typename T> class HandleTable {
public:
  /// `typeName` is the C type ("TrellisSession"), for messages.
  explicit HandleTable(const char *typeName) : typeName_(typeName) {}

  uint64_t insert(std::unique_ptr<T> object) {
    uint64_t id = nextHandleId();
    std::lock_guard<std::mutex> lock(mutex_);
    objects_[id] = std::move(object);
    return id;
  }

  /// The object of `id` into `object`, or a status saying the handle is not
  /// live.
  TrellisStatus lookup(uint64_t id, T *&object) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = objects_.find(id);
    if (it == objects_.end()) {
      object = nullptr;
      return errorStatus(std::string(typeName_) + " " + std::to_string(id) +
                         " is not a live handle (destroyed, or never "
                         "created)");
    }
    object = it->second.get();
    return nullptr;
  }

  /// Destroys the object of `id`; an id not live is ignored.
  void erase(uint64_t id) {
    std::unique_ptr<T> object;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = objects_.find(id);
      if (it == objects_.end())
        return;
      object = std::move(it->second);
      objects_.erase(it);
    }
    // Destroyed outside the lock: a session's destructor may take long.
  }

private:
  const char *typeName_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::unique_ptr<T>> objects_;
};

/// Runs the body of a C API function, turning an exception that escaped
/// the C++ below into a status (the C boundary lets none through).
template <typename Body>
TrellisStatus guarded(const char *function, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return errorStatus(std::string(function) + ": out of memory");
  } catch (const std::exception &error) {
    return errorStatus(std::string(function) + ": " + error.what());
  }
}

/// Options set by key through typed setters (trellisSessionOptionsSetInt
/// and the like): each key takes one type (trellis/Common/OptionTable.h).
template <typename Options>
using OptionKeys = std::vector<OptionRow<Options>>;

/// Sets `key` of `options` from `value` of `type`; refuses a key not in
/// `keys` (listing them), a value of another type (an integer is taken for
/// a number) and a value the row refuses (checkOptionValue). `what` names the
/// options in messages ("session option").
template <typename Options>
TrellisStatus setKeyedOption(const OptionKeys<Options> &keys, const char *what,
                             Options &options, const std::string &key,
                             OptionType type, const OptionValue &value) {
  const OptionRow<Options> *row = findOption(keys, key);
  if (!row)
    return errorStatus("unknown " + std::string(what) + " '" + key +
                       "': expected one of " + listOptionNames(keys));
  OptionValue given = value;
  // An integer is also a number.
  if (row->type == OptionType::Double && type == OptionType::Int)
    given.number = static_cast<double>(value.integer);
  else if (row->type != type)
    return errorStatus(std::string(what) + " '" + key + "' takes " +
                       optionTypeName(row->type) + ", found " +
                       optionTypeName(type));
  if (std::string problem = checkOptionValue(*row, given); !problem.empty())
    return errorStatus(std::string(what) + " '" + key + "': " + problem);
  row->set(options, given);
  return nullptr;
}

/// Row `index` of `keys`: its key, type and help (strings of static
/// storage; the pointers are not NULL); an index past the end is an error
/// naming the count. `what` names the options in messages ("session option").
template <typename Options>
TrellisStatus describeOption(const OptionKeys<Options> &keys, const char *what,
                             size_t index, const char **key,
                             TrellisOptionType *type, const char **help) {
  if (index >= keys.size())
    return errorStatus(std::string(what) + " " + std::to_string(index) +
                       ": expected an index below " +
                       std::to_string(keys.size()));
  *key = keys[index].name;
  *type = static_cast<TrellisOptionType>(keys[index].type);
  *help = keys[index].help;
  return nullptr;
}

/// Calls `callback` with `text`.
inline void sendString(const std::string &text, TrellisStringCallback callback,
                       void *userData) {
  callback(text.data(), text.size(), userData);
}

} // namespace trellis::capi

/// Returns from a C API function with an error when `pointer` is NULL.
#define TRELLIS_CAPI_REQUIRE(pointer)                                          \
  do {                                                                         \
    if (!(pointer))                                                            \
      return ::trellis::capi::errorStatus(std::string(__func__) + ": " +       \
                                          #pointer " is NULL");                \
  } while (false)

/// Returns a failed status from a C API function.
#define TRELLIS_CAPI_RETURN_IF_ERROR(expr)                                     \
  do {                                                                         \
    TrellisStatus trellisCapiStatus = (expr);                                  \
    if (trellisCapiStatus)                                                     \
      return trellisCapiStatus;                                                \
  } while (false)

#endif // TRELLIS_CAPI_HANDLES_H
