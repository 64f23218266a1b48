//===- TransformerConfig.h - A decoder's architecture -----------*- C++ -*-===//
//
// The fields of a decoder-only transformer's architecture that decide its
// graph, the same for every model family: what parseTransformerConfig
// (ModelConfig.h) fills from a config.json and the importer (ModelImporter.h)
// and the planner read, with the sizes derived from them.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_FRONTEND_TRANSFORMERCONFIG_H
#define TRELLIS_FRONTEND_TRANSFORMERCONFIG_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

/// The architecture fields Trellis reads from a config, normalized.
struct TransformerConfig {
  enum class Family { Gpt2, Llama };
  Family family = Family::Gpt2;
  int64_t numLayers = 0;
  int64_t hiddenSize = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t intermediateSize = 0;
  int64_t vocabSize = 0;
  int64_t maxPositions = 0;
  double normEpsilon = 1e-5;
  double ropeTheta = 10000.0;
  /// Gemma 3: the rotary base of the sliding-window layers (without
  /// scaling; ropeTheta and ropeScaling are the global layers'); 0: every
  /// layer rotates alike.
  double localRopeTheta = 0;
  double initializerRange = 0.02;
  bool tieWordEmbeddings = true;
  /// The embedding row that gets no gradient (Llama's pad_token_id).
  std::optional<int64_t> paddingIdx;
  /// Biases on the query, key and value projections (Qwen2), and on the
  /// output projection too with `outputBias` (GPT-OSS's attention_bias).
  bool attentionBias = false;
  bool outputBias = false;
  /// Attention sinks: a learned logit per query head in each softmax's
  /// denominator, self_attn.sinks [heads] (GPT-OSS).
  bool attentionSinks = false;
  /// RMSNorms over each head's query and key before the rotary embedding,
  /// one gain of head_dim each per layer (Qwen3's q_norm and k_norm).
  bool queryKeyNorm = false;
  /// RMSNorms over the whole query and key projections (all heads
  /// together) before they are cut into heads: OLMoE's q_norm and k_norm.
  bool projectionNorm = false;
  /// Gemma's RMSNorms scale by 1 + weight (weights start at zero).
  bool unitOffsetNorms = false;
  /// Gemma 2's RMSNorms on the attention's and the MLP's outputs too
  /// (post_attention_layernorm, post_feedforward_layernorm; the MLP's
  /// input norm is pre_feedforward_layernorm).
  bool sandwichNorms = false;
  /// OLMo 2's "reordered" norms: each branch's output normalized
  /// (post_attention_layernorm, post_feedforward_layernorm), its input
  /// not.
  bool outputNormsOnly = false;
  /// The embeddings times sqrt(hidden_size) (Gemma's normalizer).
  bool scaleEmbeddings = false;
  /// The gated MLP's activation: SiLU, or GELU's tanh approximation
  /// (Gemma's gelu_pytorch_tanh).
  enum class Activation { Silu, GeluTanh } activation = Activation::Silu;
  /// The attention's score scale (Gemma 2: query_pre_attn_scalar^-0.5);
  /// 0: 1/sqrt(headDim).
  double attentionScale = 0;
  /// Soft caps c of the attention scores and of the logits (Gemma 2):
  /// x -> c tanh(x / c); 0: none.
  double attentionSoftcap = 0, logitSoftcap = 0;
  /// Sliding-window attention (Mistral, Mixtral, the Qwen types, Gemma 2):
  /// each token of the layers `slidingLayers` marks attends to the last this
  /// many positions (its own included); unset: none.
  std::optional<int64_t> slidingWindow;
  std::vector<bool> slidingLayers;

  /// Layer `layer`'s sliding window, if it has one.
  std::optional<int64_t> windowOf(int64_t layer) const;

  /// Multi-head latent attention (DeepSeek-V3): queries through a rank
  /// `queryRank` bottleneck with an RMSNorm (0: one projection, q_proj),
  /// keys and values from a shared `kvRank` latent with an RMSNorm
  /// (kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj); each head's query and
  /// key are `nopeDim` features without position and `ropeDim` rotated
  /// ones (the key's shared by all heads), its value `valueDim` features.
  /// headDim is nopeDim + ropeDim. `kvRank` 0: not latent.
  struct LatentAttention {
    int64_t queryRank = 0, kvRank = 0;
    int64_t nopeDim = 0, ropeDim = 0, valueDim = 0;
    /// The rotated features come in interleaved pairs (x0, x1), (x2, x3),
    /// ...: transformers' rope_interleave, DeepSeek's checkpoints' layout.
    bool interleaved = true;
  } latent;
  bool isLatent() const { return latent.kvRank > 0; }

  /// Mixture-of-experts MLPs (Mixtral, Qwen2-MoE, Qwen3-MoE). `count` 0:
  /// every layer's MLP is dense.
  struct Experts {
    int64_t count = 0;
    /// Experts each token takes.
    int64_t topK = 0;
    /// Each expert's intermediate size.
    int64_t intermediateSize = 0;
    /// The chosen experts' softmax scores renormalized to sum to one
    /// (Mixtral always; Qwen's norm_topk_prob).
    bool normalize = true;
    /// Mixtral's parameter names (block_sparse_moe, experts' w1, w3, w2);
    /// else Qwen's (mlp, experts' gate_proj, up_proj, down_proj).
    bool mixtralNames = false;
    /// GPT-OSS's experts: the router mlp.router with a bias (its logits'),
    /// the experts stacked as the Hub holds them, read as x W (gate_up_proj
    /// [E, H, 2F], gate and up in alternating columns; down_proj [E, F,
    /// H]), each projection with a bias per expert, and the clamped SwiGLU
    /// (clamp(up, -limit, limit) + 1) * g sigmoid(alpha g), g = min(gate,
    /// limit).
    bool gptOss = false;
    double swigluAlpha = 1.702, swigluLimit = 7.0;
    /// The shared expert of this intermediate size (0: none) every token
    /// takes besides: Qwen2-MoE's `shared_expert`, its output scaled by
    /// sigmoid(shared_expert_gate(x)); DeepSeek-V3's `shared_experts`,
    /// added as it is.
    int64_t sharedIntermediateSize = 0;
    bool sharedGate = true;
    std::string sharedName = "shared_expert";
    /// DeepSeek-V3's router: sigmoid scores, the choice by score +
    /// e_score_correction_bias (a state, no gradient trains it) among the
    /// experts of the `topGroups` best of `groups` groups (0: no groups),
    /// the weights times `routedScaling`.
    bool sigmoidScores = false;
    bool correctionBias = false;
    int64_t groups = 0, topGroups = 0;
    double routedScaling = 1;
    /// Layers whose MLP is dense (Qwen's mlp_only_layers, and the layers
    /// decoder_sparse_step skips).
    std::vector<int64_t> denseLayers;
    /// The load-balancing loss is added to the loss times this; 0: not
    /// built (output_router_logits false).
    double auxLossCoefficient = 0;
    /// Its form: Hugging Face's, pooled over the layers (the default), or
    /// Megatron-Core's aux_loss, one per layer, summed
    /// (`router_aux_loss_kind` "per_layer").
    enum class AuxLoss { Pooled, PerLayer } auxLoss = AuxLoss::Pooled;
    /// The router z-loss (ST-MoE; Megatron-Core's moe_z_loss_coeff): this
    /// times the mean over tokens of logsumexp(router logits)^2, per layer,
    /// summed; 0: not built (`router_z_loss_coef`).
    double zLossCoefficient = 0;
  } experts;

  /// Whether layer `layer`'s MLP is a mixture of experts.
  bool isSparseLayer(int64_t layer) const;

  /// The rotary embedding's scaling (`rope_parameters` or `rope_scaling`):
  /// Llama 3's rescaled frequencies, YaRN's (frequencies blended between
  /// interpolation and extrapolation by a ramp between the correction
  /// dimensions of betaFast and betaSlow rotations, cos and sin times
  /// attentionFactor), or LongRoPE's (Phi-3: each frequency divided by its
  /// short factor, or its long one for sequences longer than
  /// originalMaxPositions; cos and sin times attentionFactor).
  struct RopeScaling {
    enum class Kind { None, Linear, Llama3, Yarn, LongRope } kind = Kind::None;
    double factor = 1, lowFrequencyFactor = 1, highFrequencyFactor = 4;
    int64_t originalMaxPositions = 8192;
    double betaFast = 32, betaSlow = 1, attentionFactor = 1;
    bool truncate = true;
    /// DeepSeek's softmax scale factor: get_mscale(factor, mscale_all_dim)
    /// squared (1 without mscale_all_dim).
    double softmaxFactor = 1;
    /// LongRoPE's per-pair factors.
    std::vector<double> shortFactors, longFactors;
  } ropeScaling;
  /// The top level's original_max_position_embeddings (0: absent), which
  /// Phi-3 gives beside its rope_scaling.
  int64_t originalMaxPositions = 0;
  /// Phi-3's fused projections: self_attn.qkv_proj [(heads + 2 kv heads)
  /// * head_dim, hidden] (query rows, then key, then value) and
  /// mlp.gate_up_proj [2 * intermediate, hidden] (gate rows, then up).
  bool fusedProjections = false;

  /// The rotated features per head: headDim, or latent.ropeDim.
  int64_t ropeDim() const { return isLatent() ? latent.ropeDim : headDim; }

  /// The rotary embedding's per-pair inverse frequencies theta^(-2i/d)
  /// over ropeDim() d, with Llama 3's, YaRN's or LongRoPE's scaling (its
  /// long factors where a sequence of `seq` exceeds the original
  /// positions).
  std::vector<double> ropeFrequencies(int64_t seq = 0) const;
  /// The sliding-window layers' frequencies where they differ (Gemma 3's
  /// localRopeTheta), else ropeFrequencies().
  std::vector<double> localRopeFrequencies() const;

  /// Parameter count of the model (tied embeddings counted once).
  int64_t numParameters() const;
};

} // namespace trellis

#endif // TRELLIS_FRONTEND_TRANSFORMERCONFIG_H
