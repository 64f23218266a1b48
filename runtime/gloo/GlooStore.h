//===- GlooStore.h - A rendezvous store as Gloo's store ---------*- C++ -*-===//
//
// Gloo's contexts meet through a gloo::rendezvous::Store, which reports
// failures by exceptions; this adapter turns the rendezvous store's
// Statuses into them (TRELLIS_GLOO_CALL turns them back into Statuses).
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_GLOO_GLOOSTORE_H
#define TRELLIS_RUNTIME_GLOO_GLOOSTORE_H

#include "trellis/Runtime/Rendezvous.h"

#include <gloo/rendezvous/store.h>

#include <stdexcept>

namespace trellis::runtime {

class GlooStore : public gloo::rendezvous::Store {
public:
  /// Over `store` (which must outlive this), reads waiting up to `timeout`.
  GlooStore(RendezvousStore &store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    if (Status status = store_.set(key, data); !status.ok())
      throw std::runtime_error(status.message());
  }
  std::vector<char> get(const std::string &key) override {
    return read(key, timeout_);
  }
  void wait(const std::vector<std::string> &keys) override {
    wait(keys, timeout_);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override {
    for (const std::string &key : keys)
      (void)read(key, timeout);
  }

private:
  std::vector<char> read(const std::string &key,
                         std::chrono::milliseconds timeout) {
    StatusOr<std::vector<char>> value = store_.get(key, timeout);
    if (!value.ok())
      throw std::runtime_error(value.status().message());
    return std::move(*value);
  }

  RendezvousStore &store_;
  std::chrono::milliseconds timeout_;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_GLOO_GLOOSTORE_H
