//===- GemmaConfig.cpp - What Gemma's config.json adds to Llama's ---------===//
//
// Reads what Gemma, Gemma 2 and Gemma 3's text model add to the Llama
// family's fields: offset norms and scaled embeddings; Gemma 2's and 3's
// sandwich norms, attention scale and soft caps; Gemma 3's query and key
// norms and local rotary base.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include <cmath>

using namespace trellis;
using namespace trellis::frontend;

llvm::Error frontend::readGemma(ConfigReader &reader, TransformerConfig &config,
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
