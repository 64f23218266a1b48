//===- LlamaConfig.cpp - The Llama family's config.json -------------------===//
//
// Reads the config.json of Llama and the model types built as Llama with
// additions: Mistral, Qwen2, Qwen3, OLMo 2, Phi-3, the mixtures of experts
// Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE and GPT-OSS, DeepSeek-V3, and Gemma 1
// to 3. Their
// shared fields, projection biases and sliding windows are read here; what
// Gemma, DeepSeek-V3, the experts and the rotary embedding add, in their own
// files.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <string>
#include <vector>

using namespace trellis;
using namespace trellis::frontend;

namespace {

/// Reads which layers attend through a sliding window, as transformers
/// does per model type: Mistral, Mixtral and Phi-3 every layer when
/// `sliding_window` is set; the Qwen types only with `use_sliding_window`,
/// then the layers `layer_types` marks "sliding_attention" or, without
/// it, Qwen2's layers from `max_window_layers` on, Qwen2-MoE's even layers
/// below it, every Qwen3-MoE layer; Gemma 2's, Gemma 3's and GPT-OSS's
/// always (their even layers, without layer_types). Needs numLayers.
llvm::Error readSlidingWindow(ConfigReader &reader, TransformerConfig &config,
                              llvm::StringRef type) {
  int64_t layers = config.numLayers;
  if (type == "mistral" || type == "mixtral" || type == "phi3") {
    int64_t window = -1;
    TRY_ASSIGN(window, reader.integerOr("sliding_window", -1));
    if (window > 0) {
      config.slidingWindow = window;
      config.slidingLayers.assign(layers, true);
    }
    return llvm::Error::success();
  }
  bool gemma3 = type == "gemma3_text";
  bool gptOss = type == "gpt_oss";
  // Gemma 2's and 3's windows and GPT-OSS's are always there.
  bool always = type == "gemma2" || gemma3 || gptOss;
  if (!type.starts_with("qwen") && !always)
    return llvm::Error::success();
  // Gemma 2, 3 and GPT-OSS: every layer layer_types marks, else Gemma 2's
  // and GPT-OSS's even ones and all but every sliding_window_pattern-th of
  // Gemma 3's, with sliding_window (4096 by default, GPT-OSS's 128; null:
  // none).
  bool sliding = always;
  if (!always)
    TRY_ASSIGN(sliding, reader.booleanOr("use_sliding_window", false));
  if (!sliding)
    return llvm::Error::success();
  int64_t window = 0;
  TRY_ASSIGN(window,
             always ? reader.integerOr("sliding_window", gptOss ? 128 : 4096, 0)
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
  if (!always)
    TRY_ASSIGN(windowLayers, reader.integerOr("max_window_layers", 28, 0));
  if (gemma3)
    TRY_ASSIGN(pattern, reader.integerOr("sliding_window_pattern", 6));
  for (int64_t layer = 0; layer < layers; ++layer)
    config.slidingLayers.push_back(gemma3   ? (layer + 1) % pattern != 0
                                   : always ? layer % 2 == 0
                                   : type == "qwen3_moe" ? true
                                   : type == "qwen2_moe"
                                       ? layer % 2 == 0 && layer < windowLayers
                                       : layer >= windowLayers);
  return llvm::Error::success();
}

} // namespace

llvm::Error frontend::readLlama(ConfigReader &reader, TransformerConfig &config,
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
  else if (type == "olmo2")
    architectures = {"Olmo2ForCausalLM", "Olmo2Model"};
  else if (type == "phi3")
    architectures = {"Phi3ForCausalLM", "Phi3Model"};
  else if (type == "gpt_oss")
    architectures = {"GptOssForCausalLM", "GptOssModel"};
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
  } else if (type == "olmoe" || type == "olmo2") {
    // OLMoE and OLMo 2 normalize the whole query and key projections;
    // clip_qkv (clamping them) and biases are not built. OLMo 2 normalizes
    // each branch's output, not its input.
    config.projectionNorm = true;
    config.outputNormsOnly = type == "olmo2";
    if (llvm::Error error = reader.refuseFlag(
            "attention_bias", false,
            llvm::formatv("{0}'s projections have no biases",
                          type == "olmoe" ? "OLMoE" : "OLMo 2")
                .str()))
      return error;
    double clip = 0;
    TRY_ASSIGN(clip, reader.nonNegativeOr("clip_qkv", 0));
    if (clip != 0)
      return configError(llvm::formatv(
          "field \"clip_qkv\": expected null (no clamping of the query, key "
          "and value projections), found {0}",
          clip));
  } else if (type == "gpt_oss") {
    // GPT-OSS: biases on all four attention projections (attention_bias),
    // a sink per head.
    TRY_ASSIGN(config.attentionBias, reader.booleanOr("attention_bias", true));
    config.outputBias = config.attentionBias;
    config.attentionSinks = true;
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
                            : type == "phi3"    ? "Phi-3"
                                                : "Mixtral")
                  .str()))
        return error;
  }
  if (type == "phi3") {
    // Phi-3: fused projections; its LongRoPE reads the original positions
    // beside rope_scaling. A partial rotary embedding (Phi-4-mini's) is
    // not built.
    config.fusedProjections = true;
    TRY_ASSIGN(config.originalMaxPositions,
               reader.integerOr("original_max_position_embeddings", 0, 0));
    double partial = 1;
    TRY_ASSIGN(partial, reader.numberOr("partial_rotary_factor", 1));
    if (partial != 1)
      return configError(llvm::formatv(
          "field \"partial_rotary_factor\": expected 1 (every feature "
          "rotated; a partial rotary embedding is not built by the "
          "importer, trellis.torch.from_module converts it), found {0}",
          partial));
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
  bool gptOss = type == "gpt_oss";
  TRY_ASSIGN(config.normEpsilon,
             reader.numberOr("rms_norm_eps", gptOss ? 1e-5 : 1e-6));
  TRY_ASSIGN(config.ropeTheta,
             reader.numberOr("rope_theta", type == "gemma3_text" ? 1000000.0
                                           : gptOss              ? 150000.0
                                                                 : 10000.0));
  TRY_ASSIGN(config.initializerRange,
             reader.numberOr("initializer_range", 0.02));
  TRY_ASSIGN(config.tieWordEmbeddings,
             reader.booleanOr("tie_word_embeddings", gemma));
  // The padding row: PyTorch's nn.Embedding(padding_idx=pad_token_id)
  // gives it no gradient; transformers' defaults: Gemma's 0, Phi-3's 32000.
  int64_t padding = -1;
  TRY_ASSIGN(padding, reader.integerOr("pad_token_id",
                                       gemma            ? 0
                                       : type == "phi3" ? 32000
                                                        : -1,
                                       0));
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
  // head_dim defaults to 256 for Gemma, 128 for Qwen3, 64 for GPT-OSS
  // (transformers' configs), hidden_size / num_attention_heads for the
  // others.
  int64_t headDim = gemma    ? 256
                    : qwen3  ? 128
                    : gptOss ? 64
                             : config.hiddenSize / config.numHeads;
  TRY_ASSIGN(config.headDim, reader.integerOr("head_dim", headDim));
  if (config.headDim % 2 != 0)
    return configError(llvm::formatv(
        "head dimension {0} is odd: rotary embeddings need an even one",
        config.headDim));
  if (type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" ||
      type == "olmoe" || gptOss)
    if (llvm::Error error = readExperts(reader, config, type))
      return error;
  // GPT-OSS rotates with YaRN when its config names no rotation
  // (transformers' GptOssConfig default).
  if (gptOss && !reader.object("rope_scaling") &&
      !reader.object("rope_parameters")) {
    TransformerConfig::RopeScaling &scaling = config.ropeScaling;
    scaling.kind = TransformerConfig::RopeScaling::Kind::Yarn;
    scaling.factor = 32;
    scaling.betaFast = 32;
    scaling.betaSlow = 1;
    scaling.truncate = false;
    scaling.originalMaxPositions = 4096;
    scaling.attentionFactor = 0.1 * std::log(scaling.factor) + 1;
    return llvm::Error::success();
  }
  return readRope(reader, config);
}
