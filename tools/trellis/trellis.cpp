//===- trellis.cpp - The trellis driver -----------------------------------===//
//
// `trellis <subcommand> [options]`; `trellis <subcommand> --help` lists the
// options of one subcommand.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

using namespace trellis::driver;

int main(int argc, char **argv) {
  // `run` and `export` are the runtime's tools: their options are parsed
  // there.
  if (argc > 1 && (llvm::StringRef(argv[1]) == "run" ||
                   llvm::StringRef(argv[1]) == "export"))
    return execRuntimeTool(argc, argv);
  // `calibrate` compiles its models, then runs the runtime's tool.
  if (argc > 1 && llvm::StringRef(argv[1]) == "calibrate")
    return runCalibrateCommand(argc, argv);
  // `plot` is the Python package's (matplotlib).
  if (argc > 1 && llvm::StringRef(argv[1]) == "plot")
    return execPlotCommand(argc, argv);
  llvm::InitLLVM initLLVM(argc, argv);
  // LLVM registers hundreds of backend options at the top level; Trellis
  // has none there (each subcommand's options are its own), so the top
  // level's help lists only the subcommands and --help.
  llvm::cl::HideUnrelatedOptions(
      llvm::ArrayRef<const llvm::cl::OptionCategory *>());
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "trellis " TRELLIS_VERSION " (MLIR and LLVM " LLVM_VERSION_STRING
          ")\n";
  });
  if (!llvm::cl::ParseCommandLineOptions(
          argc, argv,
          "Trellis: compiles models into distributed training plans and runs "
          "them\n",
          &llvm::errs()))
    return 1;
  if (groupsCommand)
    return runGroupsCommand();
  if (importCommand)
    return runImportCommand();
  if (compileCommand)
    return runCompileCommand();
  if (scheduleCommand)
    return runScheduleCommand();
  if (planCommand)
    return runPlanCommand();
  if (opsCommand)
    return runOpsCommand();
  llvm::WithColor::error(llvm::errs(), "trellis")
      << "expected a subcommand (groups, import, compile, plan, run, export, "
         "plot, schedule, ops); see 'trellis --help'\n";
  return 1;
}
