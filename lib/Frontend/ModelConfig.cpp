//===- ModelConfig.cpp - Hugging Face config.json to TransformerConfig ---===//
//
// Reads and validates the fields of a Hugging Face `config.json` that
// decide a decoder's graph, per model_type as transformers' configuration
// and modeling files read them; every error names the field and says what
// was expected and what was found.
//
//===----------------------------------------------------------------------===//

#include "trellis/Frontend/ModelImporter.h"

#include "trellis/Common/JsonShape.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>

using namespace trellis;

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

  /// An optional positive number: `fallback` when absent, 0 when null
  /// (transformers' "none" for a soft cap).
  llvm::Expected<double> numberOrNone(llvm::StringRef key, double fallback) {
    const llvm::json::Value *value = object_.get(key);
    if (value && value->kind() == llvm::json::Value::Null)
      return 0.0;
    return numberOr(key, fallback);
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
  if (llvm::Error error =
          checkArchitectures(reader, "gpt2", {"GPT2LMHeadModel", "GPT2Model"}))
    return error;
  if (llvm::Error error = reader.refuseFlag(
          "scale_attn_by_inverse_layer_idx", false,
          "attention scores divided by the layer's index too"))
    return error;
  if (llvm::Error error =
          reader.refuseFlag("scale_attn_weights", true,
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

/// Reads DeepSeek-V3's mixture of experts (transformers'
/// DeepseekV3Config and its defaults). transformers adds no load-balancing
/// loss for it: `output_router_logits` adds none here either; Trellis's
/// router z-loss may be asked for.
llvm::Error readDeepSeekExperts(ConfigReader &reader,
                                TransformerConfig &config) {
  TransformerConfig::Experts &experts = config.experts;
  TRY_ASSIGN(experts.count, reader.integer("n_routed_experts"));
  TRY_ASSIGN(experts.topK, reader.integerOr("num_experts_per_tok", 8));
  TRY_ASSIGN(experts.intermediateSize,
             reader.integerOr("moe_intermediate_size", 2048));
  TRY_ASSIGN(experts.normalize, reader.booleanOr("norm_topk_prob", true));
  TRY_ASSIGN(experts.routedScaling,
             reader.numberOr("routed_scaling_factor", 2.5));
  TRY_ASSIGN(experts.groups, reader.integerOr("n_group", 8));
  TRY_ASSIGN(experts.topGroups, reader.integerOr("topk_group", 4));
  experts.sigmoidScores = true;
  experts.correctionBias = true;
  // The original checkpoints' configs name the routing method: only
  // DeepSeek-V3's is built.
  std::string scoring, method;
  TRY_ASSIGN(scoring, reader.stringOr("scoring_func", "sigmoid"));
  TRY_ASSIGN(method, reader.stringOr("topk_method", "noaux_tc"));
  if (scoring != "sigmoid" || method != "noaux_tc")
    return configError(llvm::formatv(
        "fields \"scoring_func\" and \"topk_method\": expected \"sigmoid\" "
        "and \"noaux_tc\" (DeepSeek-V3's router), found \"{0}\" and "
        "\"{1}\"",
        scoring, method));
  int64_t e = experts.count, groups = experts.groups, k = experts.topK;
  if (e % groups != 0 || e / groups < 2)
    return configError(llvm::formatv(
        "field \"n_group\": expected a divisor of n_routed_experts ({0}) "
        "leaving two or more experts per group (a group ranks by its two "
        "best), found {1}",
        e, groups));
  if (experts.topGroups > groups)
    return configError(llvm::formatv(
        "field \"topk_group\": expected at most n_group ({0}), found {1}",
        groups, experts.topGroups));
  if (k > experts.topGroups * (e / groups))
    return configError(llvm::formatv(
        "field \"num_experts_per_tok\": expected at most the {0} experts of "
        "topk_group groups, found {1}",
        experts.topGroups * (e / groups), k));
  int64_t shared = 0;
  TRY_ASSIGN(shared, reader.integerOr("n_shared_experts", 1, 0));
  experts.sharedIntermediateSize = shared * experts.intermediateSize;
  experts.sharedGate = false;
  experts.sharedName = "shared_experts";
  int64_t dense = 0;
  TRY_ASSIGN(dense, reader.integerOr("first_k_dense_replace", 3, 0));
  for (int64_t layer = 0; layer < std::min(dense, config.numLayers); ++layer)
    experts.denseLayers.push_back(layer);
  TRY_ASSIGN(experts.zLossCoefficient,
             reader.nonNegativeOr("router_z_loss_coef", 0));
  return llvm::Error::success();
}

/// Reads the mixture-of-experts fields of a Mixtral, Qwen2-MoE, Qwen3-MoE
/// or OLMoE config (transformers' configuration files name them).
llvm::Error readExperts(ConfigReader &reader, TransformerConfig &config,
                        llvm::StringRef type) {
  TransformerConfig::Experts &experts = config.experts;
  if (type == "deepseek_v3")
    return readDeepSeekExperts(reader, config);
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
/// below it, every Qwen3-MoE layer; Gemma 2's and Gemma 3's always. Needs
/// numLayers.
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
  bool gemma3 = type == "gemma3_text";
  bool gemma2 = type == "gemma2" || gemma3;
  if (!type.starts_with("qwen") && !gemma2)
    return llvm::Error::success();
  // Gemma 2 and 3: every layer layer_types marks, else Gemma 2's even ones
  // and all but every sliding_window_pattern-th of Gemma 3's, with
  // sliding_window (4096 by default; null: none).
  bool sliding = gemma2;
  if (!gemma2)
    TRY_ASSIGN(sliding, reader.booleanOr("use_sliding_window", false));
  if (!sliding)
    return llvm::Error::success();
  int64_t window = 0;
  TRY_ASSIGN(window, gemma2 ? reader.integerOr("sliding_window", 4096, 0)
                            : reader.integer("sliding_window"));
  if (window == 0)
    return llvm::Error::success();
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
  int64_t windowLayers = 0, pattern = 6;
  if (!gemma2)
    TRY_ASSIGN(windowLayers, reader.integerOr("max_window_layers", 28, 0));
  if (gemma3)
    TRY_ASSIGN(pattern, reader.integerOr("sliding_window_pattern", 6));
  for (int64_t layer = 0; layer < layers; ++layer)
    config.slidingLayers.push_back(gemma3   ? (layer + 1) % pattern != 0
                                   : gemma2 ? layer % 2 == 0
                                   : type == "qwen3_moe" ? true
                                   : type == "qwen2_moe"
                                       ? layer % 2 == 0 && layer < windowLayers
                                       : layer >= windowLayers);
  return llvm::Error::success();
}

/// Reads what Gemma ("gemma"), Gemma 2 ("gemma2") and Gemma 3's text model
/// ("gemma3_text") add to Llama, with transformers' defaults: RMSNorms
/// scaling by 1 + weight, embeddings times sqrt(hidden_size), the tanh
/// GELU; Gemma 2's and 3's norms on both branches' outputs,
/// query_pre_attn_scalar, and soft caps of the scores and logits (null:
/// none; Gemma 3 has none by default); Gemma 3's RMSNorms over each head's
/// query and key and its sliding layers' own rotary base
/// (rope_local_base_freq).
llvm::Error readGemma(ConfigReader &reader, TransformerConfig &config,
                      llvm::StringRef type) {
  if (llvm::Error error = reader.refuseFlag(
          "attention_bias", false, "Gemma's projections have no biases"))
    return error;
  if (llvm::Error error = reader.refuseFlag(
          "use_bidirectional_attention", false,
          "attention over the whole sequence is not a causal language model"))
    return error;
  config.unitOffsetNorms = true;
  config.scaleEmbeddings = true;
  bool gemma3 = type == "gemma3_text";
  if (type != "gemma2" && !gemma3)
    return llvm::Error::success();
  config.sandwichNorms = true;
  double scalar = 0;
  TRY_ASSIGN(scalar, reader.numberOr("query_pre_attn_scalar", 256));
  config.attentionScale = 1 / std::sqrt(scalar);
  TRY_ASSIGN(config.attentionSoftcap,
             reader.numberOrNone("attn_logit_softcapping", gemma3 ? 0 : 50));
  TRY_ASSIGN(config.logitSoftcap,
             reader.numberOrNone("final_logit_softcapping", gemma3 ? 0 : 30));
  if (!gemma3)
    return llvm::Error::success();
  config.queryKeyNorm = true;
  TRY_ASSIGN(config.localRopeTheta,
             reader.numberOr("rope_local_base_freq", 10000.0));
  return llvm::Error::success();
}

/// Reads DeepSeek-V3's multi-head latent attention. Needs numHeads and
/// numKvHeads.
llvm::Error readLatentAttention(ConfigReader &reader,
                                TransformerConfig &config) {
  TransformerConfig::LatentAttention &latent = config.latent;
  // kv_b_proj makes num_attention_heads key and value heads: grouped
  // queries would repeat heads that are not there.
  if (config.numKvHeads != config.numHeads)
    return configError(llvm::formatv(
        "field \"num_key_value_heads\": expected {0} (num_attention_heads: "
        "latent attention expands one latent into every head), found {1}",
        config.numHeads, config.numKvHeads));
  TRY_ASSIGN(latent.queryRank, reader.integerOr("q_lora_rank", 0));
  TRY_ASSIGN(latent.kvRank, reader.integer("kv_lora_rank"));
  TRY_ASSIGN(latent.nopeDim, reader.integer("qk_nope_head_dim"));
  TRY_ASSIGN(latent.ropeDim, reader.integer("qk_rope_head_dim"));
  TRY_ASSIGN(latent.valueDim, reader.integer("v_head_dim"));
  TRY_ASSIGN(latent.interleaved, reader.booleanOr("rope_interleave", true));
  if (latent.ropeDim % 2 != 0)
    return configError(llvm::formatv(
        "field \"qk_rope_head_dim\": expected an even size (rotary "
        "embeddings rotate pairs), found {0}",
        latent.ropeDim));
  config.headDim = latent.nopeDim + latent.ropeDim;
  return llvm::Error::success();
}

/// Reads a rotary scaling object named `field` (rope_scaling, or
/// rope_parameters when its rope_type is not "default"): linear, llama3 or
/// yarn. Needs maxPositions and ropeTheta.
llvm::Error readRopeScaling(const llvm::json::Object &object,
                            llvm::StringRef field, TransformerConfig &config) {
  RopeScaling &scaling = config.ropeScaling;
  ConfigReader sub(object);
  llvm::StringRef ropeField = field;
  std::string type;
  TRY_ASSIGN(type, sub.stringOr("rope_type", ""));
  if (type.empty())
    TRY_ASSIGN(type, sub.stringOr("type", ""));
  if (type == "linear") {
    // Positions divided by factor: every frequency divided by it.
    scaling.kind = RopeScaling::Kind::Linear;
    TRY_ASSIGN(scaling.factor, sub.numberOr("factor", 0));
    if (!scaling.factor)
      return configError(llvm::formatv(
          "field \"{0}\": expected a factor for rope_type \"linear\"",
          ropeField));
    return llvm::Error::success();
  }
  if (type == "llama3") {
    scaling.kind = RopeScaling::Kind::Llama3;
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
    return llvm::Error::success();
  }
  if (type != "yarn")
    return configError(llvm::formatv(
        "field \"{0}\": expected rope_type \"default\", \"linear\", "
        "\"llama3\" or \"yarn\", found \"{1}\"",
        ropeField, type));
  // YaRN as transformers' _compute_yarn_parameters computes it.
  scaling.kind = RopeScaling::Kind::Yarn;
  TRY_ASSIGN(scaling.originalMaxPositions,
             sub.integer("original_max_position_embeddings"));
  TRY_ASSIGN(scaling.factor,
             sub.numberOr("factor", double(config.maxPositions) /
                                        scaling.originalMaxPositions));
  TRY_ASSIGN(scaling.betaFast, sub.numberOr("beta_fast", 32));
  TRY_ASSIGN(scaling.betaSlow, sub.numberOr("beta_slow", 1));
  TRY_ASSIGN(scaling.truncate, sub.booleanOr("truncate", true));
  double mscale = 0, mscaleAllDim = 0;
  TRY_ASSIGN(mscale, sub.nonNegativeOr("mscale", 0));
  TRY_ASSIGN(mscaleAllDim, sub.nonNegativeOr("mscale_all_dim", 0));
  auto magnitude = [&](double m) {
    return scaling.factor <= 1 ? 1.0 : 0.1 * m * std::log(scaling.factor) + 1;
  };
  double attentionFactor = 0;
  TRY_ASSIGN(attentionFactor, sub.nonNegativeOr("attention_factor", 0));
  scaling.attentionFactor = attentionFactor ? attentionFactor
                            : mscale && mscaleAllDim
                                ? magnitude(mscale) / magnitude(mscaleAllDim)
                                : magnitude(1);
  // DeepSeek's attention scales its softmax by mscale_all_dim's magnitude
  // squared (yarn_apply_mscale).
  if (mscaleAllDim)
    scaling.softmaxFactor = magnitude(mscaleAllDim) * magnitude(mscaleAllDim);
  return llvm::Error::success();
}

/// Gemma 3's rope_parameters: one object per layer kind, the global
/// ("full_attention") layers' perhaps scaled, the sliding ones' not.
llvm::Error readLayerKindRope(const llvm::json::Object &parameters,
                              TransformerConfig &config) {
  const llvm::json::Object *full = parameters.getObject("full_attention");
  const llvm::json::Object *sliding = parameters.getObject("sliding_attention");
  if (!full || !sliding)
    return configError(
        "field \"rope_parameters\": expected an object with "
        "\"full_attention\" and \"sliding_attention\" (one rotation per "
        "layer kind) or a rope_type");
  ConfigReader fullReader(*full), slidingReader(*sliding);
  TRY_ASSIGN(config.ropeTheta,
             fullReader.numberOr("rope_theta", config.ropeTheta));
  TRY_ASSIGN(config.localRopeTheta,
             slidingReader.numberOr("rope_theta", config.localRopeTheta));
  std::string slidingType, type;
  TRY_ASSIGN(slidingType, slidingReader.stringOr("rope_type", "default"));
  if (slidingType != "default")
    return configError(llvm::formatv(
        "field \"rope_parameters\": expected rope_type \"default\" for "
        "\"sliding_attention\" (scaling the sliding layers' rotation is not "
        "built), found \"{0}\"",
        slidingType));
  TRY_ASSIGN(type, fullReader.stringOr("rope_type", "default"));
  if (type == "default")
    return llvm::Error::success();
  return readRopeScaling(*full, "rope_parameters", config);
}

/// Reads the rotary embedding's theta and scaling. transformers 5 writes
/// rope_parameters (rope_type, rope_theta and the scaling's fields; for
/// Gemma 3 one such object per layer kind); earlier ones rope_theta and
/// rope_scaling. Needs maxPositions.
llvm::Error readRope(ConfigReader &reader, TransformerConfig &config) {
  const llvm::json::Object *ropeScaling = reader.object("rope_scaling");
  const llvm::json::Object *parameters = reader.object("rope_parameters");
  if (!parameters)
    return ropeScaling ? readRopeScaling(*ropeScaling, "rope_scaling", config)
                       : llvm::Error::success();
  // The older fields may repeat what rope_parameters says, never differ.
  bool byLayerKind =
      config.localRopeTheta && (parameters->get("full_attention") ||
                                parameters->get("sliding_attention"));
  const llvm::json::Object *rotation =
      byLayerKind ? parameters->getObject("full_attention") : parameters;
  if (!rotation)
    return readLayerKindRope(*parameters, config);
  ConfigReader sub(*rotation);
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
  if (byLayerKind)
    return readLayerKindRope(*parameters, config);
  config.ropeTheta = theta;
  std::string type;
  TRY_ASSIGN(type, sub.stringOr("rope_type", "default"));
  if (type == "default")
    return llvm::Error::success();
  return readRopeScaling(*parameters, "rope_parameters", config);
}

/// Reads a Llama-family config: `type` "llama", or "mistral" (Llama with a
/// sliding window), "qwen2" (Llama with query, key and value biases and a
/// sliding window it may turn on) or "qwen3" (Llama with RMSNorms over each
/// head's query and key, and Qwen2's sliding window); and their mixtures of
/// experts, "mixtral", "qwen2_moe", "qwen3_moe", and "olmoe" (RMSNorms over
/// the whole query and key projections).
llvm::Error readLlama(ConfigReader &reader, TransformerConfig &config,
                      llvm::StringRef type) {
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
  else if (type == "deepseek_v3")
    architectures = {"DeepseekV3ForCausalLM", "DeepseekV3Model"};
  else if (type == "gemma")
    architectures = {"GemmaForCausalLM", "GemmaModel"};
  else if (type == "gemma2")
    architectures = {"Gemma2ForCausalLM", "Gemma2Model"};
  else if (type == "gemma3_text")
    architectures = {"Gemma3ForCausalLM", "Gemma3TextModel"};
  if (llvm::Error error = checkArchitectures(reader, type, architectures))
    return error;
  bool deepSeek = type == "deepseek_v3";
  bool gemma = type == "gemma" || type == "gemma2" || type == "gemma3_text";
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
  } else if (gemma) {
    if (llvm::Error error = readGemma(reader, config, type))
      return error;
  } else if (deepSeek) {
    if (llvm::Error error = reader.refuseFlag(
            "attention_bias", false,
            "biases on DeepSeek-V3's q_a, kv_a and output projections are "
            "not built"))
      return error;
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
  TRY_ASSIGN(config.ropeTheta,
             reader.numberOr("rope_theta",
                             type == "gemma3_text" ? 1000000.0 : 10000.0));
  TRY_ASSIGN(config.initializerRange,
             reader.numberOr("initializer_range", 0.02));
  TRY_ASSIGN(config.tieWordEmbeddings,
             reader.booleanOr("tie_word_embeddings", gemma));
  // The padding row: PyTorch's nn.Embedding(padding_idx=pad_token_id)
  // gives it no gradient.
  int64_t padding = -1;
  TRY_ASSIGN(padding, reader.integerOr("pad_token_id", gemma ? 0 : -1, 0));
  if (padding >= config.vocabSize)
    return configError(llvm::formatv(
        "field \"pad_token_id\": expected a token id below vocab_size ({0}), "
        "found {1}",
        config.vocabSize, padding));
  if (padding >= 0)
    config.paddingIdx = padding;
  // The gated MLP's activation: SiLU; Gemma's tanh GELU (Gemma 2 names
  // the field hidden_activation).
  llvm::StringRef activationField = type == "gemma2" || type == "gemma3_text"
                                        ? "hidden_activation"
                                        : "hidden_act";
  llvm::StringRef expectedActivation = gemma ? "gelu_pytorch_tanh" : "silu";
  std::string activation;
  TRY_ASSIGN(activation, reader.stringOr(activationField, expectedActivation));
  if (activation != expectedActivation)
    return configError(
        llvm::formatv("field \"{0}\": expected \"{1}\", found \"{2}\"",
                      activationField, expectedActivation, activation));
  if (gemma)
    config.activation = TransformerConfig::Activation::GeluTanh;
  if (deepSeek) {
    if (llvm::Error error = readLatentAttention(reader, config))
      return error;
    if (llvm::Error error = readExperts(reader, config, type))
      return error;
    return readRope(reader, config);
  }
  if (config.hiddenSize % config.numHeads != 0)
    return configError(llvm::formatv(
        "num_attention_heads ({0}) does not divide hidden_size ({1})",
        config.numHeads, config.hiddenSize));
  if (config.numHeads % config.numKvHeads != 0)
    return configError(llvm::formatv(
        "num_key_value_heads ({0}) does not divide num_attention_heads ({1})",
        config.numKvHeads, config.numHeads));
  // head_dim defaults to 256 for Gemma, 128 for Qwen3 (transformers'
  // configs), hidden_size / num_attention_heads for the others.
  int64_t headDim = gemma   ? 256
                    : qwen3 ? 128
                            : config.hiddenSize / config.numHeads;
  TRY_ASSIGN(config.headDim, reader.integerOr("head_dim", headDim));
  if (config.headDim % 2 != 0)
    return configError(llvm::formatv(
        "head dimension {0} is odd: rotary embeddings need an even one",
        config.headDim));
  if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" ||
      type == "olmoe")
    if (llvm::Error error = readExperts(reader, config, type))
      return error;
  return readRope(reader, config);
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
    "\"qwen2_moe\", \"qwen3_moe\", \"olmoe\", \"deepseek_v3\", \"gemma\", "
    "\"gemma2\" or \"gemma3_text\"";

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
             type == "qwen3_moe" || type == "olmoe" || type == "deepseek_v3" ||
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
  if (parsed.numLayers > kMaxLayers)
    return configError(
        llvm::formatv("field \"{0}\": expected at most {1} layers, found {2}",
                      type == "gpt2" ? "n_layer" : "num_hidden_layers",
                      kMaxLayers, parsed.numLayers));
  return parsed;
}

} // namespace

std::vector<double> TransformerConfig::ropeFrequencies() const {
  const RopeScaling &scaling = ropeScaling;
  std::vector<double> frequencies;
  int64_t dim = ropeDim();
  // YaRN's ramp over the pairs: 0 below the correction dimension of
  // betaFast rotations (extrapolated), 1 above betaSlow's (interpolated).
  auto correctionDim = [&](double rotations) {
    return dim *
           std::log(scaling.originalMaxPositions / (rotations * 2 * M_PI)) /
           (2 * std::log(ropeTheta));
  };
  double low = correctionDim(scaling.betaFast),
         high = correctionDim(scaling.betaSlow);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high)
    high += 0.001;
  for (int64_t i = 0; i < dim / 2; ++i) {
    double frequency = std::pow(ropeTheta, -2.0 * i / dim);
    if (scaling.kind == RopeScaling::Kind::Linear) {
      frequency /= scaling.factor;
    } else if (scaling.kind == RopeScaling::Kind::Llama3) {
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
    } else if (scaling.kind == RopeScaling::Kind::Yarn) {
      double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      frequency = frequency / scaling.factor * ramp + frequency * (1 - ramp);
    }
    frequencies.push_back(frequency);
  }
  return frequencies;
}

std::vector<double> TransformerConfig::localRopeFrequencies() const {
  if (!localRopeTheta)
    return ropeFrequencies();
  TransformerConfig local = *this;
  local.ropeTheta = localRopeTheta;
  local.localRopeTheta = 0;
  local.ropeScaling = RopeScaling();
  return local.ropeFrequencies();
}

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
    if (isLatent()) {
      const LatentAttention &l = latent;
      int64_t h = numHeads;
      perLayer =
          2 * e +
          (l.queryRank ? e * l.queryRank + l.queryRank + l.queryRank * h * d
                       : e * h * d) +
          e * (l.kvRank + l.ropeDim) + l.kvRank +
          l.kvRank * h * (l.nopeDim + l.valueDim) + h * l.valueDim * e;
    }
    if (attentionBias)
      perLayer += numHeads * d + 2 * numKvHeads * d;
    if (queryKeyNorm)
      perLayer += 2 * d;
    if (sandwichNorms)
      perLayer += 2 * e;
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
        params += 3 * e * experts.sharedIntermediateSize +
                  (experts.sharedGate ? e : 0);
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
