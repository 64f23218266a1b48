//===- Support.cpp - Status objects and strings of the C API --------------===//

#include "trellis-c/Support.h"
#include "trellis/CAPI/Handles.h"
#include "trellis/Common/Utf8.h"

#include <atomic>
#include <string>

struct TrellisStatusObject {
  std::string message;
};

namespace trellis::capi {

TrellisStatus errorStatus(const std::string &message) {
  // Bindings read messages as UTF-8: a quoted byte of another encoding, or
  // half a character, would reach them empty.
  return new TrellisStatusObject{message.empty() ? "unknown error"
                                                 : wellFormedUtf8(message)};
}

uint64_t nextHandleId() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

} // namespace trellis::capi

extern "C" {

TrellisStatus trellisStatusCreateError(const char *message) {
  return trellis::capi::errorStatus(message ? message : "");
}

const char *trellisStatusGetMessage(TrellisStatus status) {
  return status ? status->message.c_str() : "";
}

void trellisStatusDestroy(TrellisStatus status) { delete status; }

const char *trellisGetVersion(void) { return TRELLIS_VERSION; }

} // extern "C"
