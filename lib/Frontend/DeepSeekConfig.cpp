//===- DeepSeekConfig.cpp - DeepSeek-V3's attention and experts -----------===//
//
// Reads what DeepSeek-V3's config.json adds to the Llama family's fields:
// multi-head latent attention and its router over grouped experts, with
// transformers' DeepseekV3Config defaults.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <string>

using namespace trellis;
using namespace trellis::frontend;

llvm::Error frontend::readLatentAttention(ConfigReader &reader,
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

llvm::Error frontend::readDeepSeekExperts(ConfigReader &reader,
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
  // DeepSeek-V3 trains with multi-token prediction; its modules are not
  // built, and dropping them silently would train another objective.
  int64_t predicted = 0;
  TRY_ASSIGN(predicted, reader.integerOr("num_nextn_predict_layers", 0, 0));
  if (predicted > 0)
    return configError(llvm::formatv(
        "field \"num_nextn_predict_layers\": expected 0, found {0}: "
        "DeepSeek-V3's multi-token prediction modules (a layer per further "
        "predicted token, its loss added at a weight) are not built; set it "
        "to 0 to train the main model alone, as transformers' "
        "DeepseekV3ForCausalLM does",
        predicted));
  return llvm::Error::success();
}
