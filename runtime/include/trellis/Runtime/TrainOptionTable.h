//===- TrainOptionTable.h - trellis run's options, once -------*- C++ -*-===//
//
// Every option of a training run is one row (trellis/Common/OptionTable.h):
// trellis-run builds its flags and help from the rows, and the C API's
// session keys (so Python's Session keywords) are the rows given
// kOptionAsKey. A row sets TrainOptions, reads its default back for the
// help, and checks a value before it is set.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TRAINOPTIONTABLE_H
#define TRELLIS_RUNTIME_TRAINOPTIONTABLE_H

#include "trellis/Common/OptionTable.h"
#include "trellis/Runtime/TrainOptions.h"

#include <vector>

namespace trellis::runtime {

/// The rows, in the help's order.
const std::vector<OptionRow<TrainOptions>> &trainOptionTable();

/// The rows with `scope` (kOptionAsKey: the C API's session keys).
std::vector<OptionRow<TrainOptions>> trainOptionsIn(OptionScope scope);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TRAINOPTIONTABLE_H
