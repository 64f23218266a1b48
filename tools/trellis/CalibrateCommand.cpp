//===- CalibrateCommand.cpp - trellis calibrate ---------------------------===//
//
// `trellis calibrate ARGS`: compiles the calibration models (a GPT-2 and a
// Llama layer, fp32, unfused: the ops the planner's cost query prices)
// into plans in a temporary directory and runs the runtime's
// `trellis-calibrate ARGS --plan ...`, which measures them with everything
// else (runtime/include/trellis/Runtime/Calibration.h) and writes the
// cluster file.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/Timing.h"
#include "trellis/Compiler/Compile.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

namespace trellis::driver {

llvm::cl::SubCommand calibrateCommand(
    "calibrate",
    "Measure this machine (kernels, links among its ranks) into a cluster "
    "file for 'trellis plan --cluster' (runs trellis-calibrate; see "
    "'trellis calibrate --help')");

namespace {

/// A calibration model: a config and the batch its plan is compiled for.
struct CalibrationModel {
  const char *name;
  std::string config;
  int64_t batch, seq;
};

/// Layers of GPT-2's and Llama's kinds at sizes between the CPU examples'
/// (gpt2-mini, GPT-2 124M); `quick`: tiny ones.
std::vector<CalibrationModel> calibrationModels(bool quick) {
  int64_t hidden = quick ? 64 : 384, heads = quick ? 2 : 6,
          vocab = quick ? 512 : 8192, seq = quick ? 32 : 256,
          batch = quick ? 2 : 4;
  std::string gpt2 = llvm::formatv(
      R"({{"model_type": "gpt2", "n_layer": 1, "n_head": {0}, "n_embd": {1},
"n_positions": {2}, "vocab_size": {3}, "activation_function": "gelu_new"})",
      heads, hidden, seq, vocab);
  std::string llama = llvm::formatv(
      R"({{"model_type": "llama", "num_hidden_layers": 1,
"num_attention_heads": {0}, "num_key_value_heads": {1}, "hidden_size": {2},
"intermediate_size": {3}, "max_position_embeddings": {4}, "vocab_size": {5}})",
      heads, heads / 2, hidden, hidden * 8 / 3, seq, vocab);
  return {{"gpt2", gpt2, batch, seq}, {"llama", llama, batch, seq}};
}

/// Compiles `model` into `planPath`; false after printing why.
bool compileCalibrationModel(const CalibrationModel &model,
                             llvm::StringRef directory, std::string &planPath) {
  llvm::SmallString<256> configPath(directory);
  llvm::sys::path::append(configPath, std::string(model.name) + ".json");
  {
    std::error_code error;
    llvm::raw_fd_ostream config(configPath, error);
    if (error) {
      reportError("calibrate",
                  "cannot write '" + configPath + "': " + error.message());
      return false;
    }
    config << model.config;
  }
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  loadDriverDialects(context);
  std::optional<LoadedModel> loaded =
      loadModel(context, configPath, {model.batch, model.seq}, "calibrate");
  if (!loaded)
    return false;
  CompileOptions options;
  options.batch = model.batch;
  options.seq = model.seq;
  options.fuse = false;
  mlir::TimingScope timing;
  mlir::FailureOr<CompiledModel> compiled = compileModel(
      std::move(*loaded), options,
      [](MessageKind kind, const llvm::Twine &message) {
        printMessage("calibrate", kind, message);
      },
      timing);
  if (mlir::failed(compiled))
    return false;
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(path, std::string(model.name) + ".plan");
  planPath = path.str().str();
  return writeOutputFile(
             "calibrate", "a calibration plan", planPath,
             [&](llvm::raw_ostream &os) { os << compiled->text; }) == 0;
}

} // namespace

int runCalibrateCommand(int argc, char **argv) {
  std::vector<llvm::StringRef> args(argv + 2, argv + argc);
  bool help = false, quick = false;
  for (llvm::StringRef arg : args) {
    help |= arg == "--help" || arg == "-h";
    quick |= arg == "--quick";
  }
  // Help needs no plans.
  if (help)
    return execRuntimeTool(argc, argv);
  static int anchor;
  std::string self = llvm::sys::fs::getMainExecutable(argv[0], &anchor);
  llvm::SmallString<256> tool(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(tool, "trellis-calibrate");

  llvm::SmallString<128> directory;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("trellis-calibrate", directory))
    return reportError("calibrate",
                       "cannot make a temporary directory: " + error.message());
  std::vector<std::string> toolArgs{tool.str().str()};
  for (llvm::StringRef arg : args)
    toolArgs.push_back(arg.str());
  bool compiled = true;
  for (const CalibrationModel &model : calibrationModels(quick)) {
    std::string planPath;
    if (!(compiled = compileCalibrationModel(model, directory, planPath)))
      break;
    toolArgs.push_back("--plan");
    toolArgs.push_back(planPath);
  }
  int exitCode = 1;
  if (compiled) {
    std::vector<llvm::StringRef> refs(toolArgs.begin(), toolArgs.end());
    std::string error;
    exitCode =
        llvm::sys::ExecuteAndWait(tool, refs, std::nullopt, {}, 0, 0, &error);
    if (exitCode < 0)
      reportError("calibrate", "cannot run '" + tool + "': " + error +
                                   " (trellis-calibrate is built with "
                                   "trellis, into the same directory)");
  }
  llvm::sys::fs::remove_directories(directory);
  return exitCode < 0 ? 1 : exitCode;
}

} // namespace trellis::driver
