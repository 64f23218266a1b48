//===- TrellisExport.cpp - Writes a checkpoint as a Hugging Face model ----===//
//
// `trellis-export`: `trellis export ARGS` executes it (runtime/HfExport.h).
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/HfExport.h"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char **argv) {
  trellis::runtime::HfExportOptions options;
  CLI::App app("Writes a checkpoint's model as a Hugging Face model: "
               "config.json, model.safetensors, generation_config.json "
               "(transformers.AutoModelForCausalLM.from_pretrained loads it)",
               "trellis export");
  app.add_option("checkpoint", options.checkpoint,
                 "A checkpoint (trellis run --save), or a directory of "
                 "step-N checkpoints (the newest is taken)")
      ->required();
  app.add_option("--hf", options.outDir,
                 "The directory to write the model into (made if missing)")
      ->required();
  app.add_option("--dtype", options.dtype,
                 "f32: the fp32 master weights, exact; bf16 or f16: rounded "
                 "to nearest even")
      ->capture_default_str();
  app.add_option("--config", options.configPath,
                 "The model's Hugging Face config.json (default: the one the "
                 "checkpoint carries)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError &error) {
    std::fprintf(stderr,
                 "trellis export: error: %s (see 'trellis export --help')\n",
                 error.what());
    return 1;
  }
  trellis::runtime::StatusOr<trellis::runtime::HfExportSummary> summary =
      trellis::runtime::exportHuggingFace(options);
  if (!summary.ok()) {
    std::fprintf(stderr, "trellis export: error: %s\n",
                 summary.status().message().c_str());
    return 1;
  }
  std::printf(
      "exported %s (step %lld): %lld tensors, %lld parameters, "
      "%s, %s -> %s\n",
      summary->checkpoint.c_str(), static_cast<long long>(summary->step),
      static_cast<long long>(summary->tensors),
      static_cast<long long>(summary->parameters), summary->modelType.c_str(),
      options.dtype.c_str(), options.outDir.c_str());
  return 0;
}
