//===- Gpt2Config.cpp - GPT-2's config.json -------------------------------===//
//
// Reads a GPT-2 config.json (model_type "gpt2") with transformers'
// GPT2Config defaults, refusing what the GPT-2 graph does not build.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include "llvm/Support/FormatVariadic.h"

#include <string>

using namespace trellis;
using namespace trellis::frontend;

llvm::Error frontend::readGpt2(ConfigReader &reader,
                               TransformerConfig &config) {
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
