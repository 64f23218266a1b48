//===- ActionNames.h - Names of a pipeline stage's action programs -*- C++ -*-===//
//
// The one spelling of action programs and schedule entries that the
// compiler writes (trellis.program, trellis.schedule, plan files) and the
// runtime reads: programs `step`, or `forward`, `backward`, `weight`, with
// `_receive` for the receives posted ahead of that action, then
// `.c<chunk>`; schedule entries `step`, or `[R]{F,B,W}<micro-batch>` with
// `.c<chunk>` when the stage has several chunks. Plain C++ (no exceptions
// thrown), shared by compiler and runtime.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_ACTIONNAMES_H
#define TRELLIS_COMMON_ACTIONNAMES_H

#include <cstdint>
#include <optional>
#include <string>

namespace trellis {

/// What an action program runs.
enum class ActionKind { Forward, Backward, Weight, Step };

/// An action program of a stage: one action kind of one chunk, or the
/// receives posted for it; or the step.
struct ActionProgramName {
  ActionKind kind = ActionKind::Step;
  bool receives = false;
  /// The model chunk on the stage (0 for the step).
  int64_t chunk = 0;
};

/// `forward.c0`, `backward_receive.c1`, `step`.
std::string programName(const ActionProgramName &program);

/// The schedule's name of `program` run for `microBatch` (ignored for the
/// step): `F3`, `RB3`, `W3.c1` (`chunked`: the stage has several chunks),
/// `step`.
std::string actionName(const ActionProgramName &program, int64_t microBatch,
                       bool chunked);

/// The program a program name names, or nullopt.
std::optional<ActionProgramName> parseProgramName(const std::string &name);

/// The program a schedule entry runs and its micro-batch (-1 for the
/// step), or nullopt. Micro-batches and chunks have at most 7 digits.
struct ScheduledActionName {
  ActionProgramName program;
  int64_t microBatch = -1;
};
std::optional<ScheduledActionName> parseActionName(const std::string &text);

} // namespace trellis

#endif // TRELLIS_COMMON_ACTIONNAMES_H
