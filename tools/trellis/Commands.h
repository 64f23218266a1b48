//===- Commands.h - Subcommands of the trellis driver -----------*- C++ -*-===//
//
// Each subcommand lives in its own file: its llvm::cl::SubCommand, its
// options (registered with cl::sub), and a function that runs it and returns
// the process exit code.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_TOOLS_TRELLIS_COMMANDS_H
#define TRELLIS_TOOLS_TRELLIS_COMMANDS_H

#include "llvm/Support/CommandLine.h"

namespace trellis::driver {

/// `trellis groups`: prints the process groups of a mesh.
extern llvm::cl::SubCommand groupsCommand;
int runGroupsCommand();

/// `trellis import`: a Hugging Face config as MLIR.
extern llvm::cl::SubCommand importCommand;
int runImportCommand();

/// `trellis compile`: a model to a training plan.
extern llvm::cl::SubCommand compileCommand;
int runCompileCommand();

/// `trellis ops`: prints the plan op table.
extern llvm::cl::SubCommand opsCommand;
int runOpsCommand();

/// `trellis plan`: the fastest plans that fit a cluster.
extern llvm::cl::SubCommand planCommand;
int runPlanCommand();

/// `trellis schedule`: simulates a pipeline schedule.
extern llvm::cl::SubCommand scheduleCommand;
int runScheduleCommand();

/// `trellis run ARGS` and `trellis export ARGS`: replace the process by
/// the runtime's tool `trellis-run ARGS` or `trellis-export ARGS` (argv[1]
/// names the subcommand); return only on failure.
int execRuntimeTool(int argc, char **argv);
/// `trellis calibrate ARGS`: compiles the calibration models and runs the
/// runtime's `trellis-calibrate ARGS --plan ...`; returns its exit code.
extern llvm::cl::SubCommand calibrateCommand;
int runCalibrateCommand(int argc, char **argv);
/// `trellis plot ARGS`: replaces this process by `python3 -m trellis.plot
/// ARGS` ($TRELLIS_PYTHON instead of python3 when set), which draws a run's
/// metrics with matplotlib.
int execPlotCommand(int argc, char **argv);

} // namespace trellis::driver

#endif // TRELLIS_TOOLS_TRELLIS_COMMANDS_H
