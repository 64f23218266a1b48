/*===- trellis-c/Support.h - Status objects and strings of the C API -----===*\
|*                                                                            *|
|* The conventions of every Trellis C header:                                 *|
|*  - Objects are opaque handles: structs holding a 64-bit id, created by     *|
|*    trellis<Type>Create... and released by trellis<Type>Destroy. A handle   *|
|*    that was destroyed (or never created) is refused with a status that     *|
|*    says so; destroying it again does nothing.                              *|
|*  - A call that can fail returns a TrellisStatus: NULL on success, else an  *|
|*    object carrying the message (what was expected, what was found), which *|
|*    the caller releases with trellisStatusDestroy.                          *|
|*  - Strings go in as NUL-terminated UTF-8 and come out through a            *|
|*    TrellisStringCallback, which may be called several times with pieces.   *|
|*  - No C++ type crosses the boundary; the headers compile as C99.           *|
|*  - One thread at a time per handle; different handles are independent.    *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef TRELLIS_C_SUPPORT_H
#define TRELLIS_C_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TRELLIS_CAPI_EXPORTED __attribute__((visibility("default")))
#else
#define TRELLIS_CAPI_EXPORTED
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The outcome of a call: NULL is success. */
typedef struct TrellisStatusObject *TrellisStatus;

/** A failed status carrying `message` (copied). */
TRELLIS_CAPI_EXPORTED TrellisStatus trellisStatusCreateError(const char *message);

/** The message of a failed status, well-formed UTF-8 (a byte of another
 * encoding written as \xNN); "" for success (NULL). Valid until the status
 * is destroyed. */
TRELLIS_CAPI_EXPORTED const char *trellisStatusGetMessage(TrellisStatus status);

/** Releases a status; NULL is allowed. */
TRELLIS_CAPI_EXPORTED void trellisStatusDestroy(TrellisStatus status);

/** Receives a string (or a piece of one): `length` bytes at `data`, not
 * NUL-terminated, valid during the call only. */
typedef void (*TrellisStringCallback)(const char *data, size_t length,
                                      void *userData);

/** The type of an option's value (compile options, session options): each
 * option takes one, through the setter of that type. */
typedef enum {
  TRELLIS_OPTION_INT = 0,
  TRELLIS_OPTION_DOUBLE = 1,
  TRELLIS_OPTION_STRING = 2,
  TRELLIS_OPTION_BOOL = 3,
} TrellisOptionType;

/** The version of the library, "MAJOR.MINOR.PATCH" (static storage). */
TRELLIS_CAPI_EXPORTED const char *trellisGetVersion(void);

#ifdef __cplusplus
}
#endif

#endif /* TRELLIS_C_SUPPORT_H */
