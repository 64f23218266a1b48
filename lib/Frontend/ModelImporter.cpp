//===- ModelImporter.cpp - Hugging Face configs to graph MLIR -------------===//

#include "trellis/Frontend/ModelImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "trellis/Common/JsonShape.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Reads typed fields of a config object; every error names the field.
class ConfigReader {
public:
  explicit ConfigReader(const llvm::json::Object &object) : object_(object) {}

  /// A required integer >= `minimum`.
  llvm::Expected<int64_t> integer(llvm::StringRef key, int64_t minimum = 1) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return configError(llvm::formatv(
          "missing field \"{0}\": expected an integer >= {1}", key, minimum));
    return checkInteger(key, *value, minimum);
  }

  /// An optional integer >= `minimum`; `fallback` when absent or null.
  llvm::Expected<int64_t> integerOr(llvm::StringRef key, int64_t fallback,
                                    int64_t minimum = 1) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    return checkInteger(key, *value, minimum);
  }

  /// An optional positive number; `fallback` when absent or null.
  llvm::Expected<double> numberOr(llvm::StringRef key, double fallback) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number || !(*number > 0) || !std::isfinite(*number))
      return configError(
          llvm::formatv("field \"{0}\": expected a positive number, found {1}",
                        key, describe(*value)));
    return *number;
  }

  /// An optional number >= 0; `fallback` when absent or null.
  llvm::Expected<double> nonNegativeOr(llvm::StringRef key, double fallback) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number || !(*number >= 0) || !std::isfinite(*number))
      return configError(
          llvm::formatv("field \"{0}\": expected a number >= 0, found {1}", key,
                        describe(*value)));
    return *number;
  }

  /// An optional list of integers (empty when absent or null).
  llvm::Expected<std::vector<int64_t>> integers(llvm::StringRef key) {
    const llvm::json::Value *value = object_.get(key);
    std::vector<int64_t> list;
    if (!value || value->kind() == llvm::json::Value::Null)
      return list;
    const llvm::json::Array *array = value->getAsArray();
    for (size_t i = 0; array && i < array->size(); ++i) {
      std::optional<int64_t> number = (*array)[i].getAsInteger();
      if (!number)
        break;
      list.push_back(*number);
    }
    if (!array || list.size() != array->size())
      return configError(
          llvm::formatv("field \"{0}\": expected a list of integers, found "
                        "{1}",
                        key, describe(*value)));
    return list;
  }

  llvm::Expected<bool> booleanOr(llvm::StringRef key, bool fallback) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag)
      return configError(
          llvm::formatv("field \"{0}\": expected true or false, found {1}", key,
                        describe(*value)));
    return *flag;
  }

  /// An optional string; `fallback` when absent.
  llvm::Expected<std::string> stringOr(llvm::StringRef key,
                                       llvm::StringRef fallback) {
    const llvm::json::Value *value = object_.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback.str();
    std::optional<llvm::StringRef> text = value->getAsString();
    if (!text)
      return configError(
          llvm::formatv("field \"{0}\": expected a string, found {1}", key,
                        describe(*value)));
    return text->str();
  }

  const llvm::json::Object *object(llvm::StringRef key) {
    return object_.getObject(key);
  }

  /// An optional list of strings (empty when absent or null).
  llvm::Expected<std::vector<std::string>> strings(llvm::StringRef key) {
    const llvm::json::Value *value = object_.get(key);
    std::vector<std::string> list;
    if (!value || value->kind() == llvm::json::Value::Null)
      return list;
    const llvm::json::Array *array = value->getAsArray();
    for (size_t i = 0; array && i < array->size(); ++i) {
      std::optional<llvm::StringRef> text = (*array)[i].getAsString();
      if (!text)
        break;
      list.push_back(text->str());
    }
    if (!array || list.size() != array->size())
      return configError(
          llvm::formatv("field \"{0}\": expected a list of strings, found {1}",
                        key, describe(*value)));
    return list;
  }

  /// Refuses a flag set to what Trellis does not build: `expected` is the
  /// value it builds, `meaning` what the other value would add.
  llvm::Error refuseFlag(llvm::StringRef key, bool expected,
                         llvm::StringRef meaning) {
    llvm::Expected<bool> flag = booleanOr(key, expected);
    if (!flag)
      return flag.takeError();
    if (*flag == expected)
      return llvm::Error::success();
    return configError(llvm::formatv(
        "field \"{0}\": expected {1} ({2}), found {3}", key,
        expected ? "true" : "false", meaning, *flag ? "true" : "false"));
  }

  static std::string describe(const llvm::json::Value &value) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << value;
    return text.size() > 40 ? text.substr(0, 40) + "..." : text;
  }

private:
  llvm::Expected<int64_t> checkInteger(llvm::StringRef key,
                                       const llvm::json::Value &value,
                                       int64_t minimum) {
    std::optional<int64_t> number = value.getAsInteger();
    if (!number || *number < minimum)
      return configError(
          llvm::formatv("field \"{0}\": expected an integer >= {1}, found {2}",
                        key, minimum, describe(value)));
    return *number;
  }

  const llvm::json::Object &object_;
};

#define TRY_ASSIGN(target, expr)                                               \
  do {                                                                         \
    auto valueOrError = (expr);                                                \
    if (!valueOrError)                                                         \
      return valueOrError.takeError();                                         \
    target = *valueOrError;                                                    \
  } while (false)

/// Refuses a config whose `architectures` name a model other than
/// `model_type`'s (a Qwen2 config relabelled llama would lose its biases).
llvm::Error checkArchitectures(ConfigReader &reader, llvm::StringRef type,
                               llvm::ArrayRef<llvm::StringRef> known) {
  std::vector<std::string> architectures;
  TRY_ASSIGN(architectures, reader.strings("architectures"));
  for (const std::string &architecture : architectures)
    if (!llvm::is_contained(known, architecture))
      return configError(llvm::formatv(
          "field \"architectures\": model_type \"{0}\" builds {1}, found "
          "\"{2}\" (another model's layers read as {0}'s)",
          type, llvm::join(known, " or "), architecture));
  return llvm::Error::success();
}

llvm::Error readGpt2(ConfigReader &reader, TransformerConfig &config) {
  config.family = TransformerConfig::Family::Gpt2;
  if (llvm::Error error = checkArchitectures(
          reader, "gpt2", {"GPT2LMHeadModel", "GPT2Model"}))
    return error;
  if (llvm::Error error = reader.refuseFlag(
          "scale_attn_by_inverse_layer_idx", false,
          "attention scores divided by the layer's index too"))
    return error;
  if (llvm::Error error = reader.refuseFlag(
          "scale_attn_weights", true,
          "attention scores scaled by 1/sqrt(head dim)"))
    return error;
  TRY_ASSIGN(config.numLayers, reader.integer("n_layer"));
  TRY_ASSIGN(config.numHeads, reader.integer("n_head"));
  TRY_ASSIGN(config.hiddenSize, reader.integer("n_embd"));
  TRY_ASSIGN(config.vocabSize, reader.integer("vocab_size"));
  int64_t context = 0;
  TRY_ASSIGN(context, reader.integerOr("n_ctx", 0, 0));
  TRY_ASSIGN(config.maxPositions, context
                                      ? reader.integerOr("n_positions", context)
                                      : reader.integer("n_positions"));
  TRY_ASSIGN(config.intermediateSize,
             reader.integerOr("n_inner", 4 * config.hiddenSize));
  TRY_ASSIGN(config.normEpsilon, reader.numberOr("layer_norm_epsilon", 1e-5));
  TRY_ASSIGN(config.initializerRange,
             reader.numberOr("initializer_range", 0.02));
  std::string activation;
  TRY_ASSIGN(activation, reader.stringOr("activation_function", "gelu_new"));
  if (activation != "gelu_new")
    return configError(llvm::formatv(
        "field \"activation_function\": expected \"gelu_new\" (GPT-2's tanh "
        "GELU), found \"{0}\"",
        activation));
  config.numKvHeads = config.numHeads;
  config.tieWordEmbeddings = true;
  if (config.hiddenSize % config.numHeads != 0)
    return configError(
        llvm::formatv("n_head ({0}) does not divide n_embd ({1})",
                      config.numHeads, config.hiddenSize));
  config.headDim = config.hiddenSize / config.numHeads;
  return llvm::Error::success();
}

using RopeScaling = TransformerConfig::RopeScaling;

/// Reads the mixture-of-experts fields of a Mixtral, Qwen2-MoE, Qwen3-MoE
/// or OLMoE config (transformers' configuration files name them).
llvm::Error readExperts(ConfigReader &reader, TransformerConfig &config,
                        llvm::StringRef type) {
  TransformerConfig::Experts &experts = config.experts;
  bool mixtral = type == "mixtral";
  experts.mixtralNames = mixtral;
  llvm::StringRef countField = mixtral ? "num_local_experts" : "num_experts";
  TRY_ASSIGN(experts.count, reader.integer(countField));
  TRY_ASSIGN(experts.topK, reader.integer("num_experts_per_tok"));
  if (experts.topK > experts.count)
    return configError(llvm::formatv(
        "field \"num_experts_per_tok\": expected at most {0} ({1}), found "
        "{2}",
        experts.count, countField, experts.topK));
  if (mixtral) {
    experts.intermediateSize = config.intermediateSize;
    experts.normalize = true;
  } else if (type == "olmoe") {
    // OLMoE: every layer sparse, experts of intermediate_size.
    experts.intermediateSize = config.intermediateSize;
    TRY_ASSIGN(experts.normalize, reader.booleanOr("norm_topk_prob", false));
  } else {
    TRY_ASSIGN(experts.intermediateSize,
               reader.integer("moe_intermediate_size"));
    TRY_ASSIGN(experts.normalize, reader.booleanOr("norm_topk_prob", false));
    int64_t step = 1;
    TRY_ASSIGN(step, reader.integerOr("decoder_sparse_step", 1));
    std::vector<int64_t> denseLayers;
    TRY_ASSIGN(denseLayers, reader.integers("mlp_only_layers"));
    for (int64_t layer = 0; layer < config.numLayers; ++layer)
      if (llvm::is_contained(denseLayers, layer) || (layer + 1) % step != 0)
        experts.denseLayers.push_back(layer);
    for (int64_t layer : denseLayers)
      if (layer < 0 || layer >= config.numLayers)
        return configError(llvm::formatv(
            "field \"mlp_only_layers\": expected layers in [0, {0}), found "
            "{1}",
            config.numLayers, layer));
  }
  if (type == "qwen2_moe")
    TRY_ASSIGN(experts.sharedIntermediateSize,
               reader.integer("shared_expert_intermediate_size"));
  // The router's noise (Mixtral's router_jitter_noise) is random: not
  // built.
  double jitter = 0;
  TRY_ASSIGN(jitter, reader.nonNegativeOr("router_jitter_noise", 0));
  if (jitter != 0)
    return configError(llvm::formatv(
        "field \"router_jitter_noise\": expected 0 (no random noise on the "
        "router's inputs), found {0}",
        jitter));
  bool auxLoss = false;
  TRY_ASSIGN(auxLoss, reader.booleanOr("output_router_logits", false));
  if (auxLoss)
    TRY_ASSIGN(experts.auxLossCoefficient,
               reader.nonNegativeOr("router_aux_loss_coef", 0.001));
  // Trellis's choice of the load-balancing loss's form (transformers'
  // pooled one unless "per_layer", Megatron-Core's) and the router z-loss
  // (Switch Transformers' config name).
  std::string kind;
  TRY_ASSIGN(kind, reader.stringOr("router_aux_loss_kind", "pooled"));
  if (kind != "pooled" && kind != "per_layer")
    return configError(llvm::formatv(
        "field \"router_aux_loss_kind\": expected \"pooled\" (transformers' "
        "loss over all layers' routers) or \"per_layer\" (Megatron-Core's "
        "aux_loss, summed over the layers), found \"{0}\"",
        kind));
  if (kind == "per_layer")
    experts.auxLoss = TransformerConfig::Experts::AuxLoss::PerLayer;
  TRY_ASSIGN(experts.zLossCoefficient,
             reader.nonNegativeOr("router_z_loss_coef", 0));
  return llvm::Error::success();
}

/// Reads which layers attend through a sliding window, as transformers
/// does per model type: Mistral and Mixtral every layer when
/// `sliding_window` is set; the Qwen types only with `use_sliding_window`,
/// then the layers `layer_types` marks "sliding_attention" or, without
/// it, Qwen2's layers from `max_window_layers` on, Qwen2-MoE's even layers
/// below it, every Qwen3-MoE layer. Needs numLayers.
llvm::Error readSlidingWindow(ConfigReader &reader, TransformerConfig &config,
                              llvm::StringRef type) {
  int64_t layers = config.numLayers;
  if (type == "mistral" || type == "mixtral") {
    int64_t window = -1;
    TRY_ASSIGN(window, reader.integerOr("sliding_window", -1));
    if (window > 0) {
      config.slidingWindow = window;
      config.slidingLayers.assign(layers, true);
    }
    return llvm::Error::success();
  }
  if (!type.starts_with("qwen"))
    return llvm::Error::success();
  bool sliding = false;
  TRY_ASSIGN(sliding, reader.booleanOr("use_sliding_window", false));
  if (!sliding)
    return llvm::Error::success();
  int64_t window = 0;
  TRY_ASSIGN(window, reader.integer("sliding_window"));
  config.slidingWindow = window;
  std::vector<std::string> kinds;
  TRY_ASSIGN(kinds, reader.strings("layer_types"));
  if (!kinds.empty()) {
    if (static_cast<int64_t>(kinds.size()) != layers)
      return configError(llvm::formatv(
          "field \"layer_types\": expected one entry per layer ({0}), found "
          "{1}",
          layers, kinds.size()));
    for (const std::string &kind : kinds) {
      if (kind != "sliding_attention" && kind != "full_attention")
        return configError(llvm::formatv(
            "field \"layer_types\": expected \"sliding_attention\" or "
            "\"full_attention\", found \"{0}\"",
            kind));
      config.slidingLayers.push_back(kind == "sliding_attention");
    }
    return llvm::Error::success();
  }
  int64_t windowLayers = 0;
  TRY_ASSIGN(windowLayers, reader.integerOr("max_window_layers", 28, 0));
  for (int64_t layer = 0; layer < layers; ++layer)
    config.slidingLayers.push_back(type == "qwen3_moe" ? true
                                   : type == "qwen2_moe"
                                       ? layer % 2 == 0 && layer < windowLayers
                                       : layer >= windowLayers);
  return llvm::Error::success();
}

/// Reads a Llama-family config: `type` "llama", or "mistral" (Llama with a
/// sliding window), "qwen2" (Llama with query, key and value biases and a
/// sliding window it may turn on) or "qwen3" (Llama with RMSNorms over each
/// head's query and key, and Qwen2's sliding window); and their mixtures of
/// experts, "mixtral", "qwen2_moe", "qwen3_moe", and "olmoe" (RMSNorms over
/// the whole query and key projections).
llvm::Error readLlama(ConfigReader &reader, TransformerConfig &config,
                      llvm::StringRef type) {
  RopeScaling &scaling = config.ropeScaling;
  config.family = TransformerConfig::Family::Llama;
  llvm::SmallVector<llvm::StringRef, 2> architectures = {"LlamaForCausalLM",
                                                         "LlamaModel"};
  if (type == "mistral")
    architectures = {"MistralForCausalLM", "MistralModel"};
  else if (type == "qwen2")
    architectures = {"Qwen2ForCausalLM", "Qwen2Model"};
  else if (type == "qwen3")
    architectures = {"Qwen3ForCausalLM", "Qwen3Model"};
  else if (type == "mixtral")
    architectures = {"MixtralForCausalLM", "MixtralModel"};
  else if (type == "qwen2_moe")
    architectures = {"Qwen2MoeForCausalLM", "Qwen2MoeModel"};
  else if (type == "qwen3_moe")
    architectures = {"Qwen3MoeForCausalLM", "Qwen3MoeModel"};
  else if (type == "olmoe")
    architectures = {"OlmoeForCausalLM", "OlmoeModel"};
  if (llvm::Error error = checkArchitectures(reader, type, architectures))
    return error;
  bool qwen2 = type == "qwen2" || type == "qwen2_moe";
  bool qwen3 = type == "qwen3" || type == "qwen3_moe";
  if (qwen2 || qwen3) {
    // Qwen2's query, key and value projections have biases (Qwen2-MoE's
    // qkv_bias); Qwen3 normalizes each head's query and key instead
    // (attention_bias, which would put biases on all four projections, is
    // not built).
    if (qwen2) {
      TRY_ASSIGN(config.attentionBias, reader.booleanOr("qkv_bias", true));
    } else {
      config.queryKeyNorm = true;
      if (llvm::Error error = reader.refuseFlag(
              "attention_bias", false,
              "biases on Qwen3's query, key, value and output projections "
              "are not built"))
        return error;
    }
  } else if (type == "olmoe") {
    // OLMoE normalizes the whole query and key projections; clip_qkv
    // (clamping them) and biases are not built.
    config.projectionNorm = true;
    if (llvm::Error error = reader.refuseFlag(
            "attention_bias", false, "OLMoE's projections have no biases"))
      return error;
    double clip = 0;
    TRY_ASSIGN(clip, reader.nonNegativeOr("clip_qkv", 0));
    if (clip != 0)
      return configError(llvm::formatv(
          "field \"clip_qkv\": expected null (no clamping of the query, key "
          "and value projections), found {0}",
          clip));
  } else {
    for (llvm::StringRef flag : {"attention_bias", "mlp_bias"})
      if (llvm::Error error = reader.refuseFlag(
              flag, false,
              llvm::formatv("{0}'s projections have no biases",
                            type == "llama"     ? "Llama"
                            : type == "mistral" ? "Mistral"
                                                : "Mixtral")
                  .str()))
        return error;
  }
  TRY_ASSIGN(config.numLayers, reader.integer("num_hidden_layers"));
  if (llvm::Error error = readSlidingWindow(reader, config, type))
    return error;
  TRY_ASSIGN(config.numHeads, reader.integer("num_attention_heads"));
  TRY_ASSIGN(config.numKvHeads,
             reader.integerOr("num_key_value_heads", config.numHeads));
  TRY_ASSIGN(config.hiddenSize, reader.integer("hidden_size"));
  TRY_ASSIGN(config.intermediateSize, reader.integer("intermediate_size"));
  TRY_ASSIGN(config.vocabSize, reader.integer("vocab_size"));
  TRY_ASSIGN(config.maxPositions, reader.integer("max_position_embeddings"));
  TRY_ASSIGN(config.normEpsilon, reader.numberOr("rms_norm_eps", 1e-6));
  TRY_ASSIGN(config.ropeTheta, reader.numberOr("rope_theta", 10000.0));
  TRY_ASSIGN(config.initializerRange,
             reader.numberOr("initializer_range", 0.02));
  TRY_ASSIGN(config.tieWordEmbeddings,
             reader.booleanOr("tie_word_embeddings", false));
  // The padding row: PyTorch's nn.Embedding(padding_idx=pad_token_id)
  // gives it no gradient.
  int64_t padding = -1;
  TRY_ASSIGN(padding, reader.integerOr("pad_token_id", -1, 0));
  if (padding >= config.vocabSize)
    return configError(llvm::formatv(
        "field \"pad_token_id\": expected a token id below vocab_size ({0}), "
        "found {1}",
        config.vocabSize, padding));
  if (padding >= 0)
    config.paddingIdx = padding;
  std::string activation;
  TRY_ASSIGN(activation, reader.stringOr("hidden_act", "silu"));
  if (activation != "silu")
    return configError(llvm::formatv(
        "field \"hidden_act\": expected \"silu\", found \"{0}\"", activation));
  if (config.hiddenSize % config.numHeads != 0)
    return configError(llvm::formatv(
        "num_attention_heads ({0}) does not divide hidden_size ({1})",
        config.numHeads, config.hiddenSize));
  if (config.numHeads % config.numKvHeads != 0)
    return configError(llvm::formatv(
        "num_key_value_heads ({0}) does not divide num_attention_heads ({1})",
        config.numKvHeads, config.numHeads));
  // Qwen3's head_dim defaults to 128 (transformers' Qwen3Config), the
  // others' to hidden_size / num_attention_heads.
  TRY_ASSIGN(
      config.headDim,
      reader.integerOr("head_dim",
                       qwen3 ? 128 : config.hiddenSize / config.numHeads));
  if (config.headDim % 2 != 0)
    return configError(llvm::formatv(
        "head dimension {0} is odd: rotary embeddings need an even one",
        config.headDim));
  if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" ||
      type == "olmoe")
    if (llvm::Error error = readExperts(reader, config, type))
      return error;
  // RoPE: transformers 5 writes rope_parameters (rope_type, rope_theta and
  // the scaling's fields); earlier ones rope_theta and rope_scaling.
  const llvm::json::Object *ropeScaling = reader.object("rope_scaling");
  llvm::StringRef ropeField = "rope_scaling";
  if (const llvm::json::Object *parameters =
          reader.object("rope_parameters")) {
    ConfigReader sub(*parameters);
    // The older fields may repeat what rope_parameters says, never differ.
    double theta = 0, olderTheta = 0;
    TRY_ASSIGN(olderTheta, reader.numberOr("rope_theta", 0));
    TRY_ASSIGN(theta, sub.numberOr("rope_theta", config.ropeTheta));
    if (ropeScaling || (olderTheta && olderTheta != theta))
      return configError(llvm::formatv(
          "field \"rope_parameters\" (rope_theta {0}) and {1} disagree: "
          "expected one description of the rotary embedding",
          llvm::format("%g", theta),
          ropeScaling ? "\"rope_scaling\""
                      : llvm::formatv("\"rope_theta\" ({0})",
                                      llvm::format("%g", olderTheta))
                            .str()));
    config.ropeTheta = theta;
    std::string type;
    TRY_ASSIGN(type, sub.stringOr("rope_type", "default"));
    if (type != "default" && type != "llama3")
      return configError(llvm::formatv(
          "field \"rope_parameters\": expected rope_type \"default\" or "
          "\"llama3\", found \"{0}\"",
          type));
    if (type == "llama3") {
      ropeScaling = parameters;
      ropeField = "rope_parameters";
    }
  }
  if (ropeScaling) {
    ConfigReader sub(*ropeScaling);
    std::string type;
    TRY_ASSIGN(type, sub.stringOr("rope_type", ""));
    if (type.empty())
      TRY_ASSIGN(type, sub.stringOr("type", ""));
    if (type != "llama3")
      return configError(llvm::formatv(
          "field \"rope_scaling\": expected rope_type \"llama3\", found "
          "\"{0}\"",
          type));
    scaling.enabled = true;
    TRY_ASSIGN(scaling.factor, sub.numberOr("factor", 8));
    TRY_ASSIGN(scaling.lowFrequencyFactor, sub.numberOr("low_freq_factor", 1));
    TRY_ASSIGN(scaling.highFrequencyFactor,
               sub.numberOr("high_freq_factor", 4));
    TRY_ASSIGN(scaling.originalMaxPositions,
               sub.integerOr("original_max_position_embeddings", 8192));
    if (scaling.highFrequencyFactor <= scaling.lowFrequencyFactor)
      return configError(llvm::formatv(
          "field \"{2}\": expected high_freq_factor ({0}) > "
          "low_freq_factor ({1})",
          scaling.highFrequencyFactor, scaling.lowFrequencyFactor, ropeField));
  }
  return llvm::Error::success();
}

/// Per-pair inverse frequencies theta^(-2i/d), with Llama 3 scaling.
SmallVector<double> ropeFrequencies(const TransformerConfig &config) {
  const RopeScaling &scaling = config.ropeScaling;
  SmallVector<double> frequencies;
  int64_t dim = config.headDim;
  for (int64_t i = 0; i < dim / 2; ++i) {
    double frequency = std::pow(config.ropeTheta, -2.0 * i / dim);
    if (scaling.enabled) {
      double wavelength = 2 * M_PI / frequency;
      double lowWavelength =
          scaling.originalMaxPositions / scaling.lowFrequencyFactor;
      double highWavelength =
          scaling.originalMaxPositions / scaling.highFrequencyFactor;
      if (wavelength > lowWavelength) {
        frequency /= scaling.factor;
      } else if (wavelength >= highWavelength) {
        double smooth =
            (scaling.originalMaxPositions / wavelength -
             scaling.lowFrequencyFactor) /
            (scaling.highFrequencyFactor - scaling.lowFrequencyFactor);
        frequency =
            (1 - smooth) * frequency / scaling.factor + smooth * frequency;
      }
    }
    frequencies.push_back(frequency);
  }
  return frequencies;
}

/// A config.json is a flat object (rope_scaling one level down): deeper
/// nesting is refused before the recursive parser could overflow the
/// stack.
constexpr int kMaxConfigDepth = 32;

/// The most layers a config may ask for (the largest published models
/// have about 128): each is built op by op.
constexpr int64_t kMaxLayers = 4096;

/// The model types Trellis builds, for messages.
constexpr const char *kModelTypes =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"mixtral\", "
    "\"qwen2_moe\", \"qwen3_moe\" or \"olmoe\"";

llvm::Expected<TransformerConfig> parseConfig(llvm::StringRef json) {
  if (std::string why = checkJsonShape(json, kMaxConfigDepth); !why.empty())
    return configError(why);
  llvm::Expected<llvm::json::Value> root = llvm::json::parse(json);
  if (!root)
    return configError("malformed JSON: " + llvm::toString(root.takeError()));
  const llvm::json::Object *object = root->getAsObject();
  if (!object)
    return configError("expected a JSON object at the top level");
  ConfigReader reader(*object);
  std::string type;
  TRY_ASSIGN(type, reader.stringOr("model_type", ""));
  TransformerConfig parsed;
  if (type == "gpt2") {
    if (llvm::Error error = readGpt2(reader, parsed))
      return std::move(error);
  } else if (type == "llama" || type == "mistral" || type == "qwen2" ||
             type == "qwen3" || type == "mixtral" || type == "qwen2_moe" ||
             type == "qwen3_moe" || type == "olmoe") {
    if (llvm::Error error = readLlama(reader, parsed, type))
      return std::move(error);
  } else if (type.empty()) {
    return configError("missing field \"model_type\": expected " +
                       std::string(kModelTypes));
  } else {
    return configError(llvm::formatv(
        "unsupported model_type \"{0}\": expected {1}", type, kModelTypes));
  }
  if (parsed.numLayers > kMaxLayers)
    return configError(
        llvm::formatv("field \"{0}\": expected at most {1} layers, found {2}",
                      type == "gpt2" ? "n_layer" : "num_hidden_layers",
                      kMaxLayers, parsed.numLayers));
  return parsed;
}

/// Builds the forward function op by op.
class TransformerBuilder {
public:
  TransformerBuilder(MLIRContext &context, const TransformerConfig &config,
                     const BatchShape &shape)
      : config_(config), shape_(shape), builder_(&context),
        loc_(UnknownLoc::get(&context)) {
    builder_.setListener(&partMarker_);
  }

  OwningOpRef<ModuleOp> build();

private:
  RankedTensorType f32(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder_.getF32Type());
  }

  /// Declares a parameter argument; `init` is "normal:<std>", "zeros" or
  /// "ones". `fileShape`, when given, is the shape checkpoints store the
  /// same row-major elements under (Hugging Face's).
  Value param(StringRef name, ArrayRef<int64_t> shape, StringRef init,
              ArrayRef<int64_t> fileShape = {});
  std::string normalInit(double std) const {
    return llvm::formatv("normal:{0}", std).str();
  }

  /// x [.., in] times a weight: HF Conv1D [in, out] or nn.Linear [out, in].
  Value linear(Value x, Value weight, bool weightIsOutIn, Value bias = {});
  Value layerNorm(Value x, StringRef prefix);
  /// An RMSNorm over the last dimension, its gain `name` of `size` (0:
  /// the hidden size).
  Value rmsNorm(Value x, StringRef name, int64_t size = 0);
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return ReshapeOp::create(builder_, loc_, x, shape);
  }

  Value gpt2Block(Value x, int64_t layer);
  Value llamaBlock(Value x, int64_t layer);
  /// SiLU-gated MLP (`prefix`.gate_proj, up_proj, down_proj).
  Value swiGlu(Value x, StringRef prefix, int64_t intermediate);
  /// A mixture-of-experts MLP: router, experts, Qwen2-MoE's shared expert.
  Value expertsMlp(Value x, StringRef layerPrefix);
  /// The router's load-balancing loss over the MoE layers built so far,
  /// times its coefficient: pooled over the layers (transformers') or one
  /// per layer, summed (Megatron-Core's).
  Value loadBalancingLoss();
  Value perLayerBalancingLoss();
  /// One layer's router z-loss from its logits [b, s, E], times its
  /// coefficient.
  Value zLoss(Value logits);

  const TransformerConfig &config_;
  BatchShape shape_;
  OpBuilder builder_;
  /// Marks every op with the part being built (set with loc_).
  ModelPartMarker partMarker_;
  Location loc_;
  Block *body_ = nullptr;
  SmallVector<Type> argTypes_;
  SmallVector<DictionaryAttr> argAttrs_;
  /// Per MoE layer: slots per expert [E] and the router's scores summed
  /// over the tokens [E] (the load-balancing loss's terms).
  SmallVector<Value> routerCounts_, routerScores_;
  /// Per MoE layer: its router z-loss (scalar).
  SmallVector<Value> routerZLosses_;
};

Value TransformerBuilder::param(StringRef name, ArrayRef<int64_t> shape,
                                StringRef init, ArrayRef<int64_t> fileShape) {
  RankedTensorType type = f32(shape);
  argTypes_.push_back(type);
  SmallVector<NamedAttribute> attrs = {
      builder_.getNamedAttr(GraphDialect::kRoleAttrName,
                            builder_.getStringAttr("param")),
      builder_.getNamedAttr(GraphDialect::kParamNameAttrName,
                            builder_.getStringAttr(name)),
      builder_.getNamedAttr(GraphDialect::kInitAttrName,
                            builder_.getStringAttr(init)),
  };
  if (!fileShape.empty())
    attrs.push_back(
        builder_.getNamedAttr(GraphDialect::kFileShapeAttrName,
                              builder_.getDenseI64ArrayAttr(fileShape)));
  argAttrs_.push_back(builder_.getDictionaryAttr(attrs));
  return body_->addArgument(type, loc_);
}

Value TransformerBuilder::linear(Value x, Value weight, bool weightIsOutIn,
                                 Value bias) {
  Value y = MatmulOp::create(builder_, loc_, x, weight, false, weightIsOutIn);
  if (bias)
    y = AddOp::create(builder_, loc_, y, bias);
  return y;
}

Value TransformerBuilder::layerNorm(Value x, StringRef prefix) {
  int64_t e = config_.hiddenSize;
  Value weight = param((prefix + ".weight").str(), {e}, "ones");
  Value bias = param((prefix + ".bias").str(), {e}, "zeros");
  return LayerNormOp::create(builder_, loc_, x, weight, bias,
                             builder_.getF64FloatAttr(config_.normEpsilon));
}

Value TransformerBuilder::rmsNorm(Value x, StringRef name, int64_t size) {
  Value weight = param(name, {size ? size : config_.hiddenSize}, "ones");
  return RmsNormOp::create(builder_, loc_, x, weight,
                           builder_.getF64FloatAttr(config_.normEpsilon));
}

Value TransformerBuilder::gpt2Block(Value x, int64_t layer) {
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t h = config_.numHeads, d = config_.headDim,
          f = config_.intermediateSize;
  std::string prefix = llvm::formatv("transformer.h.{0}", layer).str();
  loc_ = NameLoc::get(builder_.getStringAttr(prefix));
  partMarker_.setPart(PartAttr::getLayer(builder_.getContext(), layer));
  std::string normal = normalInit(config_.initializerRange);
  // GPT-2 scales the init of residual projections by 1/sqrt(2 * n_layer).
  std::string residual =
      normalInit(config_.initializerRange / std::sqrt(2.0 * config_.numLayers));

  Value hidden = layerNorm(x, prefix + ".ln_1");
  // The fused QKV projection ([E, 3E] in Hugging Face) is held as [E, 3, E]
  // (the same elements): q, k and v are then each one slice along the middle
  // dimension, and their output columns can be split by heads.
  Value qkvWeight =
      param(prefix + ".attn.c_attn.weight", {e, 3, e}, normal, {e, 3 * e});
  Value qkvBias = param(prefix + ".attn.c_attn.bias", {3, e}, "zeros", {3 * e});
  auto head = [&](int64_t index) {
    Value weight = reshape(SliceOp::create(builder_, loc_, qkvWeight,
                                           ArrayRef<int64_t>{0, index, 0},
                                           ArrayRef<int64_t>{e, 1, e}),
                           {e, e});
    Value bias = reshape(SliceOp::create(builder_, loc_, qkvBias,
                                         ArrayRef<int64_t>{index, 0},
                                         ArrayRef<int64_t>{1, e}),
                         {e});
    return reshape(linear(hidden, weight, false, bias), {b, s, h, d});
  };
  Value query = head(0), key = head(1), value = head(2);
  Value attention =
      AttentionOp::create(builder_, loc_, query, key, value,
                          builder_.getF64FloatAttr(1.0 / std::sqrt(double(d))),
                          builder_.getBoolAttr(true), ArrayAttr(),
                          IntegerAttr(), IntegerAttr(), FloatAttr());
  Value projWeight = param(prefix + ".attn.c_proj.weight", {e, e}, residual);
  Value projBias = param(prefix + ".attn.c_proj.bias", {e}, "zeros");
  x = AddOp::create(
      builder_, loc_, x,
      linear(reshape(attention, {b, s, e}), projWeight, false, projBias));

  hidden = layerNorm(x, prefix + ".ln_2");
  Value fcWeight = param(prefix + ".mlp.c_fc.weight", {e, f}, normal);
  Value fcBias = param(prefix + ".mlp.c_fc.bias", {f}, "zeros");
  Value up = GeluTanhOp::create(builder_, loc_,
                                linear(hidden, fcWeight, false, fcBias));
  Value downWeight = param(prefix + ".mlp.c_proj.weight", {f, e}, residual);
  Value downBias = param(prefix + ".mlp.c_proj.bias", {e}, "zeros");
  return AddOp::create(builder_, loc_, x,
                       linear(up, downWeight, false, downBias));
}

Value TransformerBuilder::llamaBlock(Value x, int64_t layer) {
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t hq = config_.numHeads, hkv = config_.numKvHeads;
  int64_t d = config_.headDim, f = config_.intermediateSize;
  std::string prefix = llvm::formatv("model.layers.{0}", layer).str();
  loc_ = NameLoc::get(builder_.getStringAttr(prefix));
  partMarker_.setPart(PartAttr::getLayer(builder_.getContext(), layer));
  std::string normal = normalInit(config_.initializerRange);
  DenseF64ArrayAttr frequencies =
      builder_.getDenseF64ArrayAttr(ropeFrequencies(config_));

  Value hidden = rmsNorm(x, prefix + ".input_layernorm.weight");
  // The query, key and value projections (with biases: Qwen2).
  auto project = [&](StringRef name, int64_t rows) {
    std::string weight = (prefix + ".self_attn." + name + ".weight").str();
    Value w = param(weight, {rows, e}, normal);
    Value bias;
    if (config_.attentionBias)
      bias = param((prefix + ".self_attn." + name + ".bias").str(), {rows},
                   "zeros");
    return linear(hidden, w, true, bias);
  };
  Value q = project("q_proj", hq * d);
  Value k = project("k_proj", hkv * d);
  Value v = project("v_proj", hkv * d);
  // OLMoE: the whole projections normalized, all heads together.
  if (config_.projectionNorm) {
    q = rmsNorm(q, prefix + ".self_attn.q_norm.weight", hq * d);
    k = rmsNorm(k, prefix + ".self_attn.k_norm.weight", hkv * d);
  }
  Value qHeads = reshape(q, {b, s, hq, d}), kHeads = reshape(k, {b, s, hkv, d});
  // Qwen3: each head's query and key normalized over head_dim.
  if (config_.queryKeyNorm) {
    qHeads = rmsNorm(qHeads, prefix + ".self_attn.q_norm.weight", d);
    kHeads = rmsNorm(kHeads, prefix + ".self_attn.k_norm.weight", d);
  }
  Value qRotated =
      RopeOp::create(builder_, loc_, qHeads, frequencies,
                     builder_.getBoolAttr(false), ArrayAttr(), IntegerAttr());
  Value kRotated =
      RopeOp::create(builder_, loc_, kHeads, frequencies,
                     builder_.getBoolAttr(false), ArrayAttr(), IntegerAttr());
  // A sliding window that covers the sequence is causal attention.
  std::optional<int64_t> window = config_.windowOf(layer);
  IntegerAttr windowAttr;
  if (window && *window < s)
    windowAttr = builder_.getI64IntegerAttr(*window);
  Value attention = AttentionOp::create(
      builder_, loc_, qRotated, kRotated, reshape(v, {b, s, hkv, d}),
      builder_.getF64FloatAttr(1.0 / std::sqrt(double(d))),
      builder_.getBoolAttr(true), ArrayAttr(), IntegerAttr(), windowAttr,
      FloatAttr());
  Value output = linear(
      reshape(attention, {b, s, hq * d}),
      param(prefix + ".self_attn.o_proj.weight", {e, hq * d}, normal), true);
  x = AddOp::create(builder_, loc_, x, output);

  hidden = rmsNorm(x, prefix + ".post_attention_layernorm.weight");
  Value mlp = config_.isSparseLayer(layer) ? expertsMlp(hidden, prefix)
                                           : swiGlu(hidden, prefix + ".mlp", f);
  return AddOp::create(builder_, loc_, x, mlp);
}

Value TransformerBuilder::swiGlu(Value x, StringRef prefix,
                                 int64_t intermediate) {
  int64_t e = config_.hiddenSize, f = intermediate;
  std::string normal = normalInit(config_.initializerRange);
  Value gate = linear(
      x, param((prefix + ".gate_proj.weight").str(), {f, e}, normal), true);
  Value up = linear(
      x, param((prefix + ".up_proj.weight").str(), {f, e}, normal), true);
  Value activated =
      MulOp::create(builder_, loc_, SiluOp::create(builder_, loc_, gate), up);
  return linear(activated,
                param((prefix + ".down_proj.weight").str(), {e, f}, normal),
                true);
}

Value TransformerBuilder::expertsMlp(Value x, StringRef layerPrefix) {
  const TransformerConfig::Experts &experts = config_.experts;
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t count = experts.count, k = experts.topK, f = experts.intermediateSize;
  std::string normal = normalInit(config_.initializerRange);
  std::string prefix =
      (layerPrefix + (experts.mixtralNames ? ".block_sparse_moe" : ".mlp"))
          .str();
  // The router: softmax scores of [b, s, E] logits, the top k.
  Value logits =
      linear(x, param(prefix + ".gate.weight", {count, e}, normal), true);
  auto route = MoeRouteOp::create(
      builder_, loc_, logits, builder_.getI64IntegerAttr(k), StringAttr(),
      experts.normalize ? builder_.getUnitAttr() : UnitAttr(), FloatAttr());
  Value weights = route.getWeights(), chosen = route.getExperts();
  // The experts' stacked weights: one parameter [E, ...] per projection,
  // stored per expert (`*` is the expert's index in checkpoints' names).
  auto expertWeight = [&](StringRef mixtral, StringRef qwen,
                          ArrayRef<int64_t> shape) {
    std::string name = (prefix + ".experts.*." +
                        (experts.mixtralNames ? mixtral : qwen) + ".weight")
                           .str();
    return param(name, shape, normal);
  };
  Value gateWeight = expertWeight("w1", "gate_proj", {count, f, e});
  Value upWeight = expertWeight("w3", "up_proj", {count, f, e});
  Value downWeight = expertWeight("w2", "down_proj", {count, e, f});
  Value gate = ExpertMatmulOp::create(builder_, loc_, x, gateWeight, chosen,
                                      /*transpose_rhs=*/true, ArrayAttr());
  Value up = ExpertMatmulOp::create(builder_, loc_, x, upWeight, chosen,
                                    /*transpose_rhs=*/true, ArrayAttr());
  Value activated =
      MulOp::create(builder_, loc_, SiluOp::create(builder_, loc_, gate), up);
  Value down =
      ExpertMatmulOp::create(builder_, loc_, activated, downWeight, chosen,
                             /*transpose_rhs=*/true, ArrayAttr());
  // The slots [b, s, k, E] weighted and summed in slot order.
  Value weighted =
      MulOp::create(builder_, loc_, down, reshape(weights, {b, s, k, 1}));
  Value output = ReduceSumOp::create(builder_, loc_, weighted,
                                     ArrayRef<int64_t>{2}, false);
  if (experts.sharedIntermediateSize) {
    // Qwen2-MoE's shared expert, scaled by a sigmoid gate of the token.
    Value shared =
        swiGlu(x, prefix + ".shared_expert", experts.sharedIntermediateSize);
    Value shareGate = SigmoidOp::create(
        builder_, loc_,
        linear(x, param(prefix + ".shared_expert_gate.weight", {1, e}, normal),
               true));
    output = AddOp::create(builder_, loc_, output,
                           MulOp::create(builder_, loc_, shareGate, shared));
  }
  if (experts.auxLossCoefficient > 0) {
    // The load-balancing loss's per-layer terms: how many slots chose each
    // expert, and the sum of each expert's softmax score over the tokens.
    Value counts = ExpertCountsOp::create(builder_, loc_, chosen, count);
    // In fp32 under mixed precision too (the cast keeps the branch f32):
    // the loss it adds to stays f32, as the cross-entropy's is.
    Value scores = SoftmaxOp::create(
        builder_, loc_, CastOp::create(builder_, loc_, logits, "f32"));
    Value scoreSums = ReduceSumOp::create(builder_, loc_, scores,
                                          ArrayRef<int64_t>{0, 1}, false);
    routerCounts_.push_back(counts);
    routerScores_.push_back(scoreSums);
  }
  if (experts.zLossCoefficient > 0)
    routerZLosses_.push_back(zLoss(logits));
  return output;
}

Value TransformerBuilder::zLoss(Value logits) {
  // coefficient / T * sum over the T tokens of logsumexp(logits)^2, in
  // fp32 (as the load-balancing loss); logsumexp shifted by the row's
  // maximum. A step of M micro-batches adds each one's mean / M: the sum
  // over its tokens divided by the whole batch's T, whatever the split.
  int64_t b = shape_.batch, s = shape_.seq, count = config_.experts.count;
  Value wide = CastOp::create(builder_, loc_, logits, "f32");
  Value maxima = ReduceMaxOp::create(builder_, loc_, wide, ArrayRef<int64_t>{2},
                                     /*keepdim=*/true);
  Value shifted =
      SubOp::create(builder_, loc_, wide,
                    BroadcastToOp::create(builder_, loc_, maxima,
                                          ArrayRef<int64_t>{b, s, count}));
  Value sums = ReduceSumOp::create(builder_, loc_,
                                   ExpOp::create(builder_, loc_, shifted),
                                   ArrayRef<int64_t>{2}, false);
  Value logSumExp =
      AddOp::create(builder_, loc_, LogOp::create(builder_, loc_, sums),
                    reshape(maxima, {b, s}));
  Value total = ReduceSumOp::create(
      builder_, loc_, MulOp::create(builder_, loc_, logSumExp, logSumExp),
      ArrayRef<int64_t>{0, 1}, false);
  return ScaleOp::create(builder_, loc_, total,
                         builder_.getF64FloatAttr(
                             config_.experts.zLossCoefficient / double(b * s)));
}

Value TransformerBuilder::perLayerBalancingLoss() {
  // Megatron-Core's switch_load_balancing_loss_func per MoE layer, summed:
  // E * coefficient / (k T^2) * sum_e counts_e scores_e over the T tokens
  // of a micro-batch. A step of M micro-batches adds each one's / M, which
  // is E * coefficient / (k T_batch) * sum_e counts_e scores_e / T_micro,
  // T_micro from the counts themselves (their sum / k), as in
  // loadBalancingLoss.
  const TransformerConfig::Experts &experts = config_.experts;
  Value total;
  for (size_t i = 0; i < routerCounts_.size(); ++i) {
    Value counts = routerCounts_[i];
    Value product = ReduceSumOp::create(
        builder_, loc_, MulOp::create(builder_, loc_, counts, routerScores_[i]),
        ArrayRef<int64_t>{0}, false);
    Value rows =
        ScaleOp::create(builder_, loc_,
                        ReduceSumOp::create(builder_, loc_, counts,
                                            ArrayRef<int64_t>{0}, false),
                        builder_.getF64FloatAttr(1.0 / experts.topK));
    Value layer = DivOp::create(builder_, loc_, product, rows);
    total = total ? AddOp::create(builder_, loc_, total, layer) : layer;
  }
  double tokens = double(shape_.batch) * shape_.seq;
  return ScaleOp::create(
      builder_, loc_, total,
      builder_.getF64FloatAttr(experts.count * experts.auxLossCoefficient /
                               (experts.topK * tokens)));
}

Value TransformerBuilder::loadBalancingLoss() {
  // Hugging Face's load_balancing_loss_func over a batch of R router rows
  // (MoE layers x tokens): E * sum_e (counts_e / R) * (scores_e / R), the
  // counts and scores summed over the layers. A step of M micro-batches
  // adds each micro-batch's loss divided by M (gradient accumulation's
  // mean), which is E * sum_e counts_e scores_e / (R_micro * R_batch):
  // R_micro, the rows the counts hold (their sum / k), comes from the data,
  // R_batch is the whole batch's, so one formula serves every split.
  Value counts = routerCounts_.front(), scores = routerScores_.front();
  for (size_t i = 1; i < routerCounts_.size(); ++i) {
    counts = AddOp::create(builder_, loc_, counts, routerCounts_[i]);
    scores = AddOp::create(builder_, loc_, scores, routerScores_[i]);
  }
  const TransformerConfig::Experts &experts = config_.experts;
  double batchRows = double(routerCounts_.size()) * shape_.batch * shape_.seq;
  Value product = MulOp::create(builder_, loc_, counts, scores);
  Value total =
      ReduceSumOp::create(builder_, loc_, product, ArrayRef<int64_t>{0}, false);
  Value slots =
      ReduceSumOp::create(builder_, loc_, counts, ArrayRef<int64_t>{0}, false);
  Value rows = ScaleOp::create(builder_, loc_, slots,
                               builder_.getF64FloatAttr(1.0 / experts.topK));
  return ScaleOp::create(builder_, loc_,
                         DivOp::create(builder_, loc_, total, rows),
                         builder_.getF64FloatAttr(experts.count / batchRows *
                                                  experts.auxLossCoefficient));
}

OwningOpRef<ModuleOp> TransformerBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t v = config_.vocabSize;
  bool gpt2 = config_.family == TransformerConfig::Family::Gpt2;
  std::string normal = normalInit(config_.initializerRange);

  auto function =
      func::FuncOp::create(loc_, "forward", builder_.getFunctionType({}, {}));
  module->push_back(function);
  body_ = function.addEntryBlock();
  builder_.setInsertionPointToStart(body_);

  Value embedTable =
      param(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight",
            {v, e}, normal);
  // Inputs come after the embedding table so that parameters stay in
  // model order; their position in the signature carries no meaning.
  auto input = [&](StringRef name) {
    RankedTensorType type =
        RankedTensorType::get({b, s}, builder_.getI32Type());
    argTypes_.push_back(type);
    argAttrs_.push_back(builder_.getDictionaryAttr({
        builder_.getNamedAttr(GraphDialect::kRoleAttrName,
                              builder_.getStringAttr("input")),
        builder_.getNamedAttr(GraphDialect::kParamNameAttrName,
                              builder_.getStringAttr(name)),
    }));
    return body_->addArgument(type, loc_);
  };
  Value tokens = input("tokens");
  Value targets = input("targets");

  loc_ = NameLoc::get(builder_.getStringAttr("embedding"));
  partMarker_.setPart(PartAttr::getEmbedding(builder_.getContext()));
  // The padding row (Llama's pad_token_id) gets no gradient.
  IntegerAttr padding =
      config_.paddingIdx ? builder_.getI64IntegerAttr(*config_.paddingIdx)
                         : IntegerAttr();
  Value x = EmbeddingOp::create(builder_, loc_, embedTable, tokens, 0,
                                /*axes=*/nullptr, padding);
  if (gpt2) {
    // Learned positions: the table's rows at the position ids (a split or
    // reordered sequence reads its own rows).
    Value table =
        param("transformer.wpe.weight", {config_.maxPositions, e}, normal);
    Value ids = PositionsOp::create(builder_, loc_, s, IntegerAttr(),
                                    ArrayAttr());
    Value used = EmbeddingOp::create(builder_, loc_, table, ids, 0,
                                     /*axes=*/nullptr, IntegerAttr());
    x = AddOp::create(builder_, loc_, x, used);
  }
  for (int64_t layer = 0; layer < config_.numLayers; ++layer)
    x = gpt2 ? gpt2Block(x, layer) : llamaBlock(x, layer);
  loc_ = NameLoc::get(builder_.getStringAttr("head"));
  partMarker_.setPart(PartAttr::getHead(builder_.getContext()));
  x = gpt2 ? layerNorm(x, "transformer.ln_f") : rmsNorm(x, "model.norm.weight");

  Value head = config_.tieWordEmbeddings
                   ? embedTable
                   : param("lm_head.weight", {v, e}, normal);
  Value logits = linear(x, head, /*weightIsOutIn=*/true);
  Value loss = CrossEntropyOp::create(builder_, loc_, logits, targets, 0,
                                      /*axes=*/nullptr);
  if (!routerCounts_.empty())
    loss = AddOp::create(builder_, loc_, loss,
                         config_.experts.auxLoss ==
                                 TransformerConfig::Experts::AuxLoss::PerLayer
                             ? perLayerBalancingLoss()
                             : loadBalancingLoss());
  for (Value zLoss : routerZLosses_)
    loss = AddOp::create(builder_, loc_, loss, zLoss);
  partMarker_.setPart({});
  func::ReturnOp::create(builder_, loc_, loss);

  function.setType(builder_.getFunctionType(argTypes_, loss.getType()));
  function.setAllArgAttrs(argAttrs_);
  return module;
}

} // namespace

int64_t TransformerConfig::numParameters() const {
  int64_t e = hiddenSize, d = headDim;
  int64_t params = vocabSize * e;
  if (!tieWordEmbeddings)
    params += vocabSize * e;
  int64_t perLayer = 0;
  if (family == Family::Gpt2) {
    params += maxPositions * e + 2 * e;
    perLayer = 4 * e + e * 3 * e + 3 * e + e * e + e + e * intermediateSize +
               intermediateSize + intermediateSize * e + e;
  } else {
    params += e;
    perLayer = 2 * e + numHeads * d * e * 2 + 2 * numKvHeads * d * e;
    if (attentionBias)
      perLayer += numHeads * d + 2 * numKvHeads * d;
    if (queryKeyNorm)
      perLayer += 2 * d;
    if (projectionNorm)
      perLayer += (numHeads + numKvHeads) * d;
    for (int64_t layer = 0; layer < numLayers; ++layer) {
      if (!isSparseLayer(layer)) {
        params += 3 * e * intermediateSize;
        continue;
      }
      params +=
          experts.count * e + 3 * e * experts.intermediateSize * experts.count;
      if (experts.sharedIntermediateSize)
        params += 3 * e * experts.sharedIntermediateSize + e;
    }
  }
  return params + numLayers * perLayer;
}

std::optional<int64_t> TransformerConfig::windowOf(int64_t layer) const {
  if (!slidingWindow || layer >= static_cast<int64_t>(slidingLayers.size()) ||
      !slidingLayers[layer])
    return std::nullopt;
  return slidingWindow;
}

bool TransformerConfig::isSparseLayer(int64_t layer) const {
  return experts.count > 0 && !llvm::is_contained(experts.denseLayers, layer);
}

llvm::Expected<TransformerConfig>
trellis::parseTransformerConfig(llvm::StringRef json) {
  return parseConfig(json);
}

llvm::Expected<OwningOpRef<ModuleOp>>
trellis::importTransformer(MLIRContext &context,
                           const TransformerConfig &config,
                           const BatchShape &shape) {
  context.loadDialect<GraphDialect, func::FuncDialect>();
  if (shape.batch < 1 || shape.seq < 1)
    return configError(
        llvm::formatv("expected batch and sequence >= 1, found {0} and {1}",
                      shape.batch, shape.seq));
  if (shape.seq > config.maxPositions)
    return configError(
        llvm::formatv("sequence length {0} exceeds the model's {1} positions",
                      shape.seq, config.maxPositions));
  return TransformerBuilder(context, config, shape).build();
}
