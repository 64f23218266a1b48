//===- FamilyReaders.h - Readers of each model family's fields --*- C++ -*-===//
//
// The readers that fill a TransformerConfig from a config.json, one group of
// model families per file: GPT-2's (Gpt2Config.cpp), the Llama family's
// (LlamaConfig.cpp), and what Gemma (GemmaConfig.cpp), DeepSeek-V3
// (DeepSeekConfig.cpp), the mixtures of experts (ExpertsConfig.cpp) and the
// rotary embedding (RopeConfig.cpp) add to Llama's. Each leaves `config`
// partly filled when it fails.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_LIB_FRONTEND_FAMILYREADERS_H
#define TRELLIS_LIB_FRONTEND_FAMILYREADERS_H

#include "ConfigReader.h"
#include "trellis/Frontend/TransformerConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace trellis::frontend {

/// Reads a GPT-2 config (model_type "gpt2").
llvm::Error readGpt2(ConfigReader &reader, TransformerConfig &config);

/// Reads a Llama-family config: `type` "llama", or "mistral" (Llama with a
/// sliding window), "qwen2" (Llama with query, key and value biases and a
/// sliding window it may turn on) or "qwen3" (Llama with RMSNorms over each
/// head's query and key, and Qwen2's sliding window); and their mixtures of
/// experts, "mixtral", "qwen2_moe", "qwen3_moe", and "olmoe" (RMSNorms over
/// the whole query and key projections).
llvm::Error readLlama(ConfigReader &reader, TransformerConfig &config,
                      llvm::StringRef type);

/// Reads what Gemma ("gemma"), Gemma 2 ("gemma2") and Gemma 3's text model
/// ("gemma3_text") add to Llama, with transformers' defaults: RMSNorms
/// scaling by 1 + weight, embeddings times sqrt(hidden_size), the tanh
/// GELU; Gemma 2's and 3's norms on both branches' outputs,
/// query_pre_attn_scalar, and soft caps of the scores and logits (null:
/// none; Gemma 3 has none by default); Gemma 3's RMSNorms over each head's
/// query and key and its sliding layers' own rotary base
/// (rope_local_base_freq).
llvm::Error readGemma(ConfigReader &reader, TransformerConfig &config,
                      llvm::StringRef type);

/// Reads DeepSeek-V3's multi-head latent attention. Needs numHeads and
/// numKvHeads.
llvm::Error readLatentAttention(ConfigReader &reader,
                                TransformerConfig &config);

/// Reads DeepSeek-V3's mixture of experts (transformers'
/// DeepseekV3Config and its defaults). transformers adds no load-balancing
/// loss for it: `output_router_logits` adds none here either; Trellis's
/// router z-loss may be asked for.
llvm::Error readDeepSeekExperts(ConfigReader &reader,
                                TransformerConfig &config);

/// Reads the mixture-of-experts fields of a Mixtral, Qwen2-MoE, Qwen3-MoE
/// or OLMoE config (transformers' configuration files name them), or
/// DeepSeek-V3's (readDeepSeekExperts). Needs numLayers and
/// intermediateSize.
llvm::Error readExperts(ConfigReader &reader, TransformerConfig &config,
                        llvm::StringRef type);

/// Reads the rotary embedding's theta and scaling. transformers 5 writes
/// rope_parameters (rope_type, rope_theta and the scaling's fields; for
/// Gemma 3 one such object per layer kind); earlier ones rope_theta and
/// rope_scaling. Needs maxPositions.
llvm::Error readRope(ConfigReader &reader, TransformerConfig &config);

} // namespace trellis::frontend

#endif // TRELLIS_LIB_FRONTEND_FAMILYREADERS_H
