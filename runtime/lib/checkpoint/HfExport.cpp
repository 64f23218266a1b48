//===- HfExport.cpp - Checkpoints as Hugging Face models ------------------===//

#include "trellis/Runtime/HfExport.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/Checkpoint.h"
#include "trellis/Runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

namespace trellis::runtime {

namespace {

using json = nlohmann::json;

/// The checkpoint's name for the fp32 master weight of a 16-bit parameter
/// (TrainerTensors.cpp).
const char *const kMasterPrefix = "master.";

/// Per model type: the architecture transformers builds for causal LM,
/// the embedding table's name, the config keys of the vocabulary and the
/// width, and the endings of the names of tensors transformers keeps in
/// fp32 whatever the dtype (`_keep_in_fp32_modules_strict`).
struct ModelTypeFacts {
  const char *architecture;
  const char *embedding;
  const char *width;
  std::vector<std::string> keptInF32 = {};
};

const std::map<std::string, ModelTypeFacts> &modelTypes() {
  static const std::map<std::string, ModelTypeFacts> types = {
      {"gpt2", {"GPT2LMHeadModel", "transformer.wte.weight", "n_embd"}},
      {"llama",
       {"LlamaForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"mistral",
       {"MistralForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"qwen2",
       {"Qwen2ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"qwen3",
       {"Qwen3ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"olmo2",
       {"Olmo2ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"phi3", {"Phi3ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"mixtral",
       {"MixtralForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"qwen2_moe",
       {"Qwen2MoeForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"qwen3_moe",
       {"Qwen3MoeForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"olmoe",
       {"OlmoeForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"gpt_oss",
       {"GptOssForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"gemma",
       {"GemmaForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"gemma2",
       {"Gemma2ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      {"gemma3_text",
       {"Gemma3ForCausalLM", "model.embed_tokens.weight", "hidden_size"}},
      // The routers (weights and score correction biases) stay fp32.
      {"deepseek_v3",
       {"DeepseekV3ForCausalLM",
        "model.embed_tokens.weight",
        "hidden_size",
        {".mlp.gate.weight", ".mlp.gate.e_score_correction_bias"}}},
  };
  return types;
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Writes `text` to `path` under a temporary name, then renames it.
Status writeTextFile(const std::string &path, const std::string &text) {
  std::string temporary = path + ".tmp-" + std::to_string(getpid());
  if (std::string why = writeRegularFile(temporary, text); !why.empty()) {
    std::remove(temporary.c_str());
    return Status::error("cannot write '" + temporary + "': " + why);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return Status::error("cannot write '" + path + "'");
  }
  return Status::success();
}

StatusOr<json> readConfig(const std::string &path, const std::string &what) {
  std::string contents;
  if (std::string why = readRegularFile(path, contents, kMaxConfigFileBytes);
      !why.empty())
    return Status::error(what + " '" + path + "' " + why);
  json config = json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object())
    return Status::error(what + " '" + path +
                         "': expected a JSON object (a Hugging Face "
                         "config.json)");
  return config;
}

/// `config[key]` when it is an integer, else -1 (never throws).
int64_t integerField(const json &config, const char *key) {
  auto found = config.find(key);
  return found != config.end() && found->is_number_integer()
             ? found->get<int64_t>()
             : -1;
}

/// The dtype names of the export (`--dtype`), safetensors' and torch's.
struct ExportDtype {
  const char *safetensors;
  const char *torch;
};

StatusOr<ExportDtype> exportDtype(const std::string &name) {
  if (name == "f32")
    return ExportDtype{"F32", "float32"};
  if (name == "bf16")
    return ExportDtype{"BF16", "bfloat16"};
  if (name == "f16")
    return ExportDtype{"F16", "float16"};
  return Status::error("--dtype: expected f32, bf16 or f16, found '" + name +
                       "'");
}

} // namespace

StatusOr<HfExportSummary> exportHuggingFace(const HfExportOptions &options) {
  StatusOr<ExportDtype> dtype = exportDtype(options.dtype);
  if (!dtype.ok())
    return dtype.status();
  StatusOr<std::string> checkpoint = resolveCheckpoint(options.checkpoint);
  if (!checkpoint.ok())
    return checkpoint.status();
  StatusOr<CheckpointManifest> manifest = verifyCheckpoint(*checkpoint);
  if (!manifest.ok())
    return manifest.status();

  // The config: given, or the one the checkpoint carries.
  std::string configPath = options.configPath;
  if (configPath.empty()) {
    configPath = *checkpoint + "/config.json";
    if (!whyNotRegularFile(configPath).empty())
      return Status::error(
          "the checkpoint '" + *checkpoint +
          "' has no config.json (its plan was not compiled from a Hugging "
          "Face config): give --config CONFIG.json, the config of the "
          "model it trained");
  }
  StatusOr<json> config = readConfig(configPath, options.configPath.empty()
                                                     ? "the checkpoint's config"
                                                     : "--config");
  if (!config.ok())
    return config.status();
  auto typeField = config->find("model_type");
  std::string modelType = typeField != config->end() && typeField->is_string()
                              ? typeField->get<std::string>()
                              : std::string();
  auto facts = modelTypes().find(modelType);
  if (facts == modelTypes().end())
    return Status::error("config '" + configPath +
                         "': expected model_type gpt2, llama, mistral, "
                         "qwen2, qwen3, olmo2, phi3, mixtral, qwen2_moe, "
                         "qwen3_moe, olmoe, gpt_oss, deepseek_v3, gemma, "
                         "gemma2 or "
                         "gemma3_text, found '" +
                         modelType + "'");

  StatusOr<SafetensorsFile> model =
      readSafetensors(*checkpoint + "/model.safetensors");
  if (!model.ok())
    return model.status();
  // The fp32 master weights of a mixed-precision run replace the rounded
  // compute weights. An fp32 checkpoint's weights are its masters: its
  // optimizer file (the moments, twice the model) is not read.
  bool rounded = false;
  for (const auto &[name, entry] : model->tensors)
    rounded |= entry.dtype != "F32";
  std::string optimizerPath = *checkpoint + "/optimizer.safetensors";
  if (rounded && whyNotRegularFile(optimizerPath).empty()) {
    StatusOr<SafetensorsFile> optimizer = readSafetensors(optimizerPath);
    if (!optimizer.ok())
      return optimizer.status();
    for (auto &[name, entry] : model->tensors) {
      auto master = optimizer->tensors.find(kMasterPrefix + name);
      if (master != optimizer->tensors.end())
        entry.values = std::move(master->second.values);
    }
  }

  // The config must describe these weights: the embedding table's rows
  // are its vocabulary, its columns its width.
  auto embedding = model->tensors.find(facts->second.embedding);
  if (embedding == model->tensors.end())
    return Status::error("the checkpoint has no " +
                         std::string(facts->second.embedding) + ", which a " +
                         modelType +
                         " model has: is the config that of another model?");
  std::vector<int64_t> expected = {integerField(*config, "vocab_size"),
                                   integerField(*config, facts->second.width)};
  if (embedding->second.shape != expected)
    return Status::error(
        "config '" + configPath + "' gives " + facts->second.embedding +
        " the shape [" + std::to_string(expected[0]) + ", " +
        std::to_string(expected[1]) + "] (vocab_size, " + facts->second.width +
        "), the checkpoint [" +
        (embedding->second.shape.size() == 2
             ? std::to_string(embedding->second.shape[0]) + ", " +
                   std::to_string(embedding->second.shape[1])
             : std::string("rank ") +
                   std::to_string(embedding->second.shape.size())) +
        "]");

  // Weights holding NaN or infinity (saved by a run under --on-nonfinite
  // continue) are no model: refused, as --load refuses them.
  for (const auto &[name, entry] : model->tensors)
    for (size_t i = 0; i < entry.values.size(); ++i)
      if (!std::isfinite(entry.values[i]))
        return Status::error(
            "the checkpoint '" + *checkpoint + "': tensor \"" + name +
            "\" holds " + (std::isnan(entry.values[i]) ? "NaN" : "infinity") +
            " at element " + std::to_string(i) +
            ": refusing to export weights that are not finite (a run under "
            "--on-nonfinite continue saved them; export an earlier "
            "checkpoint)");

  // Stacked expert weights as per-expert tensors, the Hub's names.
  splitStackedTensors(*model);
  HfExportSummary summary;
  summary.checkpoint = *checkpoint;
  summary.step = manifest->step;
  summary.modelType = modelType;
  SafetensorsFile exported;
  exported.metadata = {{"format", "pt"}};
  for (auto &[name, entry] : model->tensors) {
    bool kept = false;
    for (const std::string &ending : facts->second.keptInF32)
      kept |= endsWith(name, ending);
    entry.dtype = kept ? "F32" : dtype->safetensors;
    summary.parameters += static_cast<int64_t>(entry.values.size());
    ++summary.tensors;
    exported.tensors[name] = std::move(entry);
  }

  std::error_code error;
  std::filesystem::create_directories(options.outDir, error);
  if (std::string kind = whyNotDirectory(options.outDir); !kind.empty())
    return Status::error("--hf: '" + options.outDir + "' " + kind +
                         ", expected a directory to write the model into");
  TRELLIS_RETURN_IF_ERROR(
      writeSafetensors(options.outDir + "/model.safetensors", exported));
  json written = *config;
  if (!written.contains("architectures"))
    written["architectures"] = {facts->second.architecture};
  // transformers 5 reads "dtype", earlier versions "torch_dtype".
  written["dtype"] = dtype->torch;
  written["torch_dtype"] = dtype->torch;
  TRELLIS_RETURN_IF_ERROR(
      writeTextFile(options.outDir + "/config.json", written.dump(2) + "\n"));
  json generation = {{"_from_model_config", true}};
  for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config->contains(key) && !(*config)[key].is_null())
      generation[key] = (*config)[key];
  TRELLIS_RETURN_IF_ERROR(writeTextFile(
      options.outDir + "/generation_config.json", generation.dump(2) + "\n"));
  return summary;
}

} // namespace trellis::runtime
