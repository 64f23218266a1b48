//===- ExpertsConfig.cpp - Mixture-of-experts fields of a config ----------===//
//
// Reads the mixture-of-experts fields of Mixtral, Qwen2-MoE, Qwen3-MoE,
// OLMoE and GPT-OSS configs: the experts, which layers are dense, the
// router's losses.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <string>
#include <vector>

using namespace trellis;
using namespace trellis::frontend;

llvm::Error frontend::readExperts(ConfigReader &reader,
                                  TransformerConfig &config,
                                  llvm::StringRef type) {
  TransformerConfig::Experts &experts = config.experts;
  if (type == "deepseek_v3")
    return readDeepSeekExperts(reader, config);
  bool mixtral = type == "mixtral";
  bool gptOss = type == "gpt_oss";
  experts.mixtralNames = mixtral;
  experts.gptOss = gptOss;
  llvm::StringRef countField =
      mixtral || gptOss ? "num_local_experts" : "num_experts";
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
  } else if (gptOss) {
    // GPT-OSS: every layer sparse, experts of intermediate_size, the
    // softmax of the chosen logits (the chosen scores renormalized), the
    // clamped SwiGLU's constants.
    experts.intermediateSize = config.intermediateSize;
    experts.normalize = true;
    TRY_ASSIGN(experts.swigluAlpha,
               reader.nonNegativeOr("swiglu_alpha", 1.702));
    TRY_ASSIGN(experts.swigluLimit, reader.nonNegativeOr("swiglu_limit", 7.0));
    if (experts.swigluLimit == 0)
      return configError("field \"swiglu_limit\": expected a limit > 0 (the "
                         "SwiGLU's gate and up clamped to it), found 0");
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
