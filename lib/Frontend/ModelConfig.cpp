//===- ModelConfig.cpp - Hugging Face config.json to TransformerConfig ----===//
//
// Reads and validates the fields of a Hugging Face `config.json` that
// decide a decoder's graph, per model_type as transformers' configuration
// and modeling files read them; every error names the field and says what
// was expected and what was found. The model_type picks the reader
// (FamilyReaders.h).
//
//===----------------------------------------------------------------------===//

#include "trellis/Frontend/ModelConfig.h"

#include "ConfigReader.h"
#include "FamilyReaders.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>

using namespace trellis;
using namespace trellis::frontend;

namespace {

/// The most layers a config may ask for (the largest published models
/// have about 128): each is built op by op.
constexpr int64_t kMaxLayers = 4096;

/// The model types Trellis builds, for messages.
constexpr const char *kModelTypes =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"olmo2\", "
    "\"phi3\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\", \"olmoe\", "
    "\"gpt_oss\", \"deepseek_v3\", \"gemma\", \"gemma2\" or "
    "\"gemma3_text\"";

} // namespace

llvm::Expected<TransformerConfig>
trellis::parseTransformerConfig(llvm::StringRef json) {
  llvm::Expected<llvm::json::Value> root = parseConfigObject(json);
  if (!root)
    return root.takeError();
  ConfigReader reader(*root->getAsObject());
  std::string type;
  TRY_ASSIGN(type, reader.stringOr("model_type", ""));
  TransformerConfig parsed;
  if (type == "gpt2") {
    if (llvm::Error error = readGpt2(reader, parsed))
      return std::move(error);
  } else if (type == "llama" || type == "mistral" || type == "qwen2" ||
             type == "qwen3" || type == "olmo2" || type == "phi3" ||
             type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" ||
             type == "olmoe" || type == "gpt_oss" || type == "deepseek_v3" ||
             type == "gemma" || type == "gemma2" || type == "gemma3_text") {
    if (llvm::Error error = readLlama(reader, parsed, type))
      return std::move(error);
  } else if (type == "gemma3") {
    return configError(
        "model_type \"gemma3\" is Gemma 3's image and text model: expected "
        "its text_config (model_type \"gemma3_text\"), the language model "
        "Trellis builds");
  } else if (type.empty()) {
    return configError("missing field \"model_type\": expected " +
                       std::string(kModelTypes));
  } else {
    return configError(llvm::formatv(
        "unsupported model_type \"{0}\": expected {1}", type, kModelTypes));
  }
  // Weights stored quantized (DeepSeek-V3's FP8 blocks with their
  // weight_scale_inv) are not dequantized on load: training them as if
  // they were the weights would be another model.
  if (const llvm::json::Object *quantization =
          reader.object("quantization_config")) {
    std::string method = "?";
    if (std::optional<llvm::StringRef> name =
            quantization->getString("quant_method"))
      method = name->str();
    return configError(llvm::formatv(
        "field \"quantization_config\" (quant_method \"{0}\"): Trellis "
        "reads unquantized weights only (FP8 blocks scaled by "
        "weight_scale_inv are not dequantized on load): expected a config "
        "without it and weights dequantized to bf16 or fp32",
        method));
  }
  if (parsed.numLayers > kMaxLayers)
    return configError(
        llvm::formatv("field \"{0}\": expected at most {1} layers, found {2}",
                      type == "gpt2" ? "n_layer" : "num_hidden_layers",
                      kMaxLayers, parsed.numLayers));
  return parsed;
}
