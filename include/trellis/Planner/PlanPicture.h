//===- PlanPicture.h - A search drawn as SVG --------------------*- C++ -*-===//
//
// `trellis plan --picture FILE.svg`: above, every priced candidate's
// predicted throughput (tokens/s per device) against its peak memory, the
// usable memory marked, the feasible front (the fastest plan within each
// memory) drawn and the chosen plan circled; below, the chosen plan's
// simulated step per rank (forward, backward and weight-gradient actions,
// then the step's reductions and optimizer). Each point carries its plan
// as a tooltip.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_PLANNER_PLANPICTURE_H
#define TRELLIS_PLANNER_PLANPICTURE_H

#include "trellis/Planner/Planner.h"

#include <string>

namespace trellis::planner {

/// The SVG document of `result` (which has at least one plan).
std::string planPictureSvg(const PlanRequest &request,
                           const SearchResult &result);

} // namespace trellis::planner

#endif // TRELLIS_PLANNER_PLANPICTURE_H
