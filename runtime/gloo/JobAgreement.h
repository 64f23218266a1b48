//===- JobAgreement.h - Ranks agree they run the same job -------*- C++ -*-===//
//
// At rendezvous, before any Gloo context: every rank publishes the fields
// that must agree across the job (the plan's checksum, seed, data, steps,
// checkpoint and fault options); rank 0 compares them and publishes one
// verdict, so a rank started with another plan or option fails every rank
// with a message naming it and the field, instead of joining and
// diverging.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_GLOO_JOBAGREEMENT_H
#define TRELLIS_RUNTIME_GLOO_JOBAGREEMENT_H

#include "trellis/Runtime/Communicator.h"

#include <gloo/rendezvous/store.h>

namespace trellis::runtime {

/// Publishes `fields` for `rank` of `worldSize` in `store` and waits for
/// rank 0's verdict (rank 0 waits for every rank's fields first); an error
/// names the first rank and field that differ from rank 0's, with both
/// values, or the rank that did not arrive within `timeout`.
Status agreeOnJob(gloo::rendezvous::Store &store, int64_t rank,
                  int64_t worldSize, const JobFields &fields,
                  std::chrono::milliseconds timeout);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_GLOO_JOBAGREEMENT_H
