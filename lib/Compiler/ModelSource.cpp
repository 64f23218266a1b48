//===- ModelSource.cpp - A model to compile, from a file or text ----------===//

#include "trellis/Compiler/ModelSource.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "trellis/Common/FileKind.h"
#include "trellis/Dialect/Graph/IR/GraphDialect.h"
#include "trellis/Dialect/Trellis/IR/TrellisDialect.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <nlohmann/json.hpp>

#include <cstdio>

using namespace mlir;

namespace trellis {

void loadCompilerDialects(MLIRContext &context) {
  context.loadDialect<graph::GraphDialect, TrellisDialect, func::FuncDialect>();
}

std::optional<LoadedModel>
loadModelText(MLIRContext &context, llvm::StringRef text, ModelFormat format,
              llvm::StringRef sourceName, const BatchShape &shape,
              MessageSink sink, llvm::raw_ostream &parseOutput) {
  loadCompilerDialects(context);
  LoadedModel model;
  if (format == ModelFormat::Mlir) {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, sourceName), llvm::SMLoc());
    SourceMgrDiagnosticHandler handler(sourceMgr, &context, parseOutput);
    model.module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!model.module)
      return std::nullopt;
    model.metadata["source"] = sourceName.str();
    return model;
  }
  llvm::Expected<TransformerConfig> config = parseTransformerConfig(text);
  if (!config) {
    sink(MessageKind::Error,
         sourceName + ": " + llvm::toString(config.takeError()));
    return std::nullopt;
  }
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTransformer(context, *config, shape);
  if (!module) {
    sink(MessageKind::Error,
         sourceName + ": " + llvm::toString(module.takeError()));
    return std::nullopt;
  }
  model.module = std::move(*module);
  bool gpt2 = config->family == TransformerConfig::Family::Gpt2;
  model.metadata = llvm::json::Object{
      {"source", sourceName.str()},
      {"family", gpt2 ? "gpt2" : "llama"},
      {"layers", config->numLayers},
      {"hidden_size", config->hiddenSize},
      {"heads", config->numHeads},
      {"kv_heads", config->numKvHeads},
      {"vocab_size", config->vocabSize},
      {"parameters", config->numParameters()},
      {"batch", shape.batch},
      {"seq", shape.seq},
  };
  // The Hugging Face config itself: checkpoints carry it as config.json,
  // from which `trellis export --hf` writes a model transformers loads.
  // As text in one canonical form (sorted keys, so that a config from a
  // file and from a dict compile alike) that keeps each number's kind:
  // llvm::json prints 2.0 as 2, which transformers' typed configs refuse
  // for a float field.
  nlohmann::json parsed = nlohmann::json::parse(
      text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object())
    model.metadata["hf_config"] =
        parsed.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
  return model;
}

std::optional<LoadedModel> loadModelFile(MLIRContext &context,
                                         llvm::StringRef path,
                                         const BatchShape &shape,
                                         MessageSink sink,
                                         llvm::raw_ostream &parseOutput) {
  // "-" is standard input, read up to the larger bound; anything else
  // must be a regular file within its kind's bound (a FIFO or /dev/zero
  // would be read without end).
  bool mlir = path.ends_with(".mlir");
  std::string text;
  if (path == "-") {
    char chunk[1 << 16];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, stdin)) > 0) {
      text.append(chunk, got);
      if (static_cast<int64_t>(text.size()) > kMaxMlirFileBytes) {
        sink(MessageKind::Error,
             "standard input holds more than " +
                 formatBytes(kMaxMlirFileBytes) +
                 ", the most a config.json or .mlir model may hold");
        return std::nullopt;
      }
    }
  } else if (std::string why = readRegularFile(path.str(), text,
                                               mlir ? kMaxMlirFileBytes
                                                    : kMaxConfigFileBytes);
             !why.empty()) {
    sink(MessageKind::Error, "cannot read '" + path + "': it " + why +
                                 ", expected a config.json or .mlir file");
    return std::nullopt;
  }
  return loadModelText(context, text,
                       path.ends_with(".mlir") ? ModelFormat::Mlir
                                               : ModelFormat::Config,
                       path, shape, sink, parseOutput);
}

} // namespace trellis
