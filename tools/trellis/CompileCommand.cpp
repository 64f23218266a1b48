//===- CompileCommand.cpp - `trellis compile` -----------------------------===//
//
// Model (config.json or MLIR) -> training step (autodiff + optimizer) ->
// plan file for the runtime: the command line of the compiler library
// (trellis/Compiler/Compile.h).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ModelLoading.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "trellis/Compiler/Compile.h"
#include "trellis/Compiler/CompileOptionTable.h"
#include "trellis/Planner/Planner.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <functional>
#include <map>
#include <memory>

namespace cl = llvm::cl;

namespace trellis::driver {

cl::SubCommand
    compileCommand("compile",
                   "Compile a model into a training plan for the runtime");

namespace {
cl::OptionCategory modelCategory("Model and batch");
cl::OptionCategory parallelCategory("Parallelism (mesh, pipeline, ZeRO)");
cl::OptionCategory optimizerCategory("Optimizer");
cl::OptionCategory precisionCategory("Precision, memory and fusion");
cl::OptionCategory outputCategory("Output and reports");

cl::opt<std::string> compileInput(cl::Positional,
                                  cl::desc("<config.json | model.mlir>"),
                                  cl::Required, cl::sub(compileCommand));
cl::opt<std::string> compileOutput("o", cl::desc("Output file"),
                                   cl::value_desc("file"), cl::init("-"),
                                   cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<std::string> compileReportJson(
    "report-json",
    cl::desc("Write the report as JSON (docs/Report.md): per rank, the "
             "model states, the memory plan's peak, and the bytes sent per "
             "step by collective kind"),
    cl::value_desc("file"), cl::cat(outputCategory), cl::sub(compileCommand));
cl::opt<bool> compileAuto(
    "auto",
    cl::desc("Choose the parallelism (dp, tp, pp, cp, ZeRO, schedule, "
             "micro-batches, sequence parallelism, recomputation) as "
             "`trellis plan` does: the fastest plan that fits --gpus devices "
             "of --cluster, for --batch sequences of --seq tokens"),
    cl::cat(parallelCategory), cl::sub(compileCommand));
cl::opt<std::string> compileCluster(
    "cluster",
    cl::desc("With --auto: a cluster preset (a100-80g, h100-sxm, h200-sxm, "
             "b200) or a cluster file (docs/Planner.md)"),
    cl::value_desc("preset|file"), cl::cat(parallelCategory),
    cl::sub(compileCommand));
cl::opt<int64_t> compileGpus("gpus",
                             cl::desc("With --auto: the devices the plan uses"),
                             cl::init(0), cl::cat(parallelCategory),
                             cl::sub(compileCommand));
cl::opt<bool> compileTiming(
    "timing",
    cl::desc("Print the wall time of loading the model, of each pass, and "
             "of emitting and writing the plan"),
    cl::cat(outputCategory), cl::sub(compileCommand));

/// A flag made from a row of the option table, and how to read its value.
struct TableFlag {
  const OptionRow<CompileOptions> *row;
  std::unique_ptr<cl::Option> option;
  std::function<OptionValue()> value;
};

void assign(OptionValue &value, int64_t integer) { value.integer = integer; }
void assign(OptionValue &value, double number) { value.number = number; }
void assign(OptionValue &value, const std::string &text) { value.text = text; }
void assign(OptionValue &value, bool flag) { value.flag = flag; }

template <typename T>
TableFlag makeFlag(const OptionRow<CompileOptions> &row,
                   cl::OptionCategory &category) {
  auto option = std::make_unique<cl::opt<T>>(
      llvm::StringRef(row.name), cl::desc(row.help), cl::cat(category),
      cl::sub(compileCommand));
  if (*row.valueName)
    option->setValueStr(row.valueName);
  cl::opt<T> *flag = option.get();
  return {&row, std::move(option), [flag] {
            OptionValue value;
            assign(value, flag->getValue());
            return value;
          }};
}

/// The flags of every row of the option table, under their groups'
/// headings.
std::vector<TableFlag> makeTableFlags() {
  std::map<std::string, cl::OptionCategory *> categories = {
      {modelCategory.getName().str(), &modelCategory},
      {parallelCategory.getName().str(), &parallelCategory},
      {optimizerCategory.getName().str(), &optimizerCategory},
      {precisionCategory.getName().str(), &precisionCategory},
      {outputCategory.getName().str(), &outputCategory}};
  std::vector<TableFlag> flags;
  for (const OptionRow<CompileOptions> &row : compileOptionTable()) {
    cl::OptionCategory &category = *categories.at(row.group);
    switch (row.type) {
    case OptionType::Int:
      flags.push_back(makeFlag<int64_t>(row, category));
      break;
    case OptionType::Double:
      flags.push_back(makeFlag<double>(row, category));
      break;
    case OptionType::String:
      flags.push_back(makeFlag<std::string>(row, category));
      break;
    case OptionType::Bool:
      flags.push_back(makeFlag<bool>(row, category));
      break;
    }
  }
  return flags;
}

std::vector<TableFlag> tableFlags = makeTableFlags();

/// The compiler library's options from the command line: the flags given
/// set their rows (an option not given keeps CompileOptions' default, or
/// stays unset where its absence means something), or nullopt after an
/// error.
std::optional<CompileOptions> compileOptions() {
  CompileOptions options;
  for (const TableFlag &flag : tableFlags) {
    if (flag.option->getNumOccurrences() == 0)
      continue;
    OptionValue value = flag.value();
    if (std::string invalid = checkOptionValue(*flag.row, value);
        !invalid.empty()) {
      reportError("compile", "--" + std::string(flag.row->name) + ": " + invalid);
      return std::nullopt;
    }
    flag.row->set(options, value);
  }
  return options;
}

void printCompileMessage(MessageKind kind, const llvm::Twine &message) {
  printMessage("compile", kind, message);
}

/// --auto: the planner's fastest plan that fits, set into `options`;
/// prints it. Returns false after reporting why there is none.
bool choosePlan(CompileOptions &options) {
  // What a plan sets, and the layers of its stages (which the compiler
  // balances for the plan's pipeline), may not be given with it.
  for (const TableFlag &flag : tableFlags) {
    llvm::StringRef name = flag.row->name;
    if ((planner::planSetsOption(name) || name == "pp-layers") &&
        flag.option->getNumOccurrences() > 0) {
      reportError("compile", "--auto chooses --" + name +
                                 ": give one or the other (trellis plan "
                                 "--evaluate prices a plan you fix)");
      return false;
    }
  }
  if (compileCluster.empty() || compileGpus < 1) {
    reportError("compile", "--auto needs --cluster (a preset or a file) and "
                           "--gpus (the devices to plan for)");
    return false;
  }
  planner::PlanRequest request;
  std::string error;
  std::optional<planner::ClusterSpec> cluster =
      planner::loadCluster(compileCluster, error);
  if (!cluster) {
    reportError("compile", "--cluster: " + error);
    return false;
  }
  if (!planner::readPlanModel(compileInput, request, error)) {
    reportError("compile", error);
    return false;
  }
  request.cluster = std::move(*cluster);
  request.gpus = compileGpus;
  request.globalBatch = options.batch;
  request.seq = options.seq;
  request.precision = options.precision;
  request.top = 1;
  std::optional<planner::SearchResult> result =
      planner::searchPlans(request, planner::PlanConstraints(), error);
  if (!result) {
    reportError("compile", "--auto: " + error);
    return false;
  }
  if (result->plans.empty()) {
    const planner::PlanEvaluation &closest = *result->closest;
    reportError(
        "compile",
        llvm::formatv("--auto: no plan fits {0} per device of {1}; "
                      "the smallest found needs {2}{3}: {4} ({5})",
                      planner::formatBytes(request.cluster.usableMemory()),
                      request.cluster.name,
                      closest.exactMemory ? "" : "at least ",
                      planner::formatBytes(closest.peakBytes()),
                      closest.choice.text(), closest.bindingTerm));
    return false;
  }
  const planner::PlanEvaluation &best = result->plans.front();
  planner::applyPlanChoice(options, request, best.choice);
  llvm::errs() << llvm::formatv(
      "trellis compile: --auto: {0} on {1} x {2}: predicted {3:f4} s a step, "
      "{4:f0} tokens/s per device, peak {5} (of {6} plans priced)\n",
      best.choice.text(), compileGpus.getValue(), request.cluster.name,
      best.time.seconds, best.tokensPerSecondPerGpu,
      planner::formatBytes(best.peakBytes()), result->candidatesEvaluated);
  return true;
}
} // namespace

int runCompileCommand() {
  // Options checked before the model is read.
  std::optional<CompileOptions> given = compileOptions();
  if (!given)
    return 1;
  CompileOptions options = std::move(*given);
  if (compileAuto && !choosePlan(options))
    return 1;
  if (!compileAuto && (!compileCluster.empty() || compileGpus != 0))
    return reportError("compile", "--cluster and --gpus choose a plan with "
                                  "--auto; without it they mean nothing");
  bool printReport = options.report;
  options.report |= !compileReportJson.empty();
  if (mlir::failed(checkCompileOptions(options, printCompileMessage)))
    return 1;
  // One step function: the passes have nothing to run in parallel.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  mlir::DefaultTimingManager timing;
  timing.setEnabled(compileTiming);
  timing.setOutput(mlir::createOutputStrategy(
      mlir::DefaultTimingManager::OutputFormat::Text, llvm::errs()));
  mlir::TimingScope rootTiming = timing.getRootScope();
  mlir::TimingScope loadTiming = rootTiming.nest("load model");
  // The forward describes one micro-batch; the step takes them all.
  std::optional<LoadedModel> model =
      loadModel(context, compileInput,
                {options.batch / options.microBatches, options.seq}, "compile");
  if (!model)
    return 1;
  loadTiming.stop();
  mlir::FailureOr<CompiledModel> compiled = compileModel(
      std::move(*model), options, printCompileMessage, rootTiming);
  if (mlir::failed(compiled))
    return 1;
  if (printReport)
    printReports(compiled->reports, llvm::errs());
  if (!compileReportJson.empty() &&
      writeOutputFile("compile", "--report-json", compileReportJson,
                      [&](llvm::raw_ostream &os) {
                        os << llvm::formatv(
                                  "{0:2}", reportJson(compiled->modelParameters,
                                                      compiled->meshAxes,
                                                      compiled->reports))
                           << "\n";
                      }) != 0)
    return 1;
  mlir::TimingScope writeTiming = rootTiming.nest("write plan");
  return writeOutputFile("compile", "the plan", compileOutput,
                         [&](llvm::raw_ostream &os) { os << compiled->text; });
}

} // namespace trellis::driver
