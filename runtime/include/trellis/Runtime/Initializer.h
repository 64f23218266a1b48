//===- Initializer.h - Deterministic parameter initialization ---*- C++ -*-===//
//
// Values come from a counter-based generator keyed by (seed, parameter name,
// element index), so any rank that holds any slice of a parameter computes
// the same numbers as a single device holding all of it.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_INITIALIZER_H
#define TRELLIS_RUNTIME_INITIALIZER_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <string>

namespace trellis::runtime {

class Executor;

/// Fills parameters and optimizer states per their `init` ("normal:<std>",
/// "zeros", "ones") and the step counter with 0. A sharded argument of
/// `rank` gets the values of its box of the global tensor.
Status initializeArguments(Executor &executor, uint64_t seed, int64_t rank);

/// The standard normal sample number `index` of stream `key`.
double counterNormal(uint64_t key, uint64_t index);

/// A 64-bit key for a name (FNV-1a) mixed with a seed.
uint64_t streamKey(uint64_t seed, const std::string &name);

/// splitmix64: a well-mixed 64-bit hash.
uint64_t mix64(uint64_t value);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_INITIALIZER_H
