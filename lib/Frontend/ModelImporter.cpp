//===- ModelImporter.cpp - Hugging Face configs to graph MLIR -------------===//
//
// Builds a decoder's forward pass and loss, op by op, from its parsed
// config (ModelConfig.cpp reads config.json).
//
//===----------------------------------------------------------------------===//

#include "trellis/Frontend/ModelImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "trellis/Dialect/Graph/IR/GraphOps.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace trellis;
using namespace trellis::graph;

namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
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
  /// Declares a state argument (read, never trained), zeros at first.
  Value state(StringRef name, ArrayRef<int64_t> shape);
  /// Declares an argument of `role`.
  Value argument(StringRef role, StringRef name, ArrayRef<int64_t> shape,
                 StringRef init, ArrayRef<int64_t> fileShape);
  std::string normalInit(double std) const {
    return llvm::formatv("normal:{0}", std).str();
  }

  /// x [.., in] times a weight: HF Conv1D [in, out] or nn.Linear [out, in].
  Value linear(Value x, Value weight, bool weightIsOutIn, Value bias = {});
  Value layerNorm(Value x, StringRef prefix);
  /// An RMSNorm over the last dimension, its gain `name` of `size` (0:
  /// the hidden size), epsilon `epsilon` (0: the config's).
  Value rmsNorm(Value x, StringRef name, int64_t size = 0, double epsilon = 0);
  /// The rotary embedding on [b, s, heads, d] as layer `layer` rotates
  /// (-1: the global layers' rotation), its cos and sin scaled by YaRN's
  /// attention factor; `interleaved`: the pairs (2i, 2i + 1) turn
  /// (DeepSeek's rope_interleave), else (i, i + d / 2).
  Value rope(Value x, int64_t layer = -1, bool interleaved = false);
  /// Layer `layer`'s self-attention through its output projection.
  Value attention(Value hidden, StringRef prefix, int64_t layer);
  /// DeepSeek-V3's multi-head latent attention through its output
  /// projection.
  Value latentAttention(Value hidden, StringRef prefix, int64_t layer);
  /// The attention op over [b, s, heads, d] queries and keys and [b, s,
  /// heads, dv] values, with layer `layer`'s sliding window, if any, and
  /// the `sinks` [heads] if given; a value head size other than the
  /// query's is zero-padded to the larger and the result cut back to dv.
  Value attend(Value query, Value key, Value value, double scale, int64_t layer,
               Value sinks = {});
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return ReshapeOp::create(builder_, loc_, x, shape);
  }

  Value gpt2Block(Value x, int64_t layer);
  Value llamaBlock(Value x, int64_t layer);
  /// Gated MLP (`prefix`.gate_proj, up_proj, down_proj): SiLU, or
  /// Gemma's tanh GELU.
  Value swiGlu(Value x, StringRef prefix, int64_t intermediate);
  /// A mixture-of-experts MLP: router, experts, Qwen2-MoE's shared expert.
  Value expertsMlp(Value x, StringRef layerPrefix);
  /// GPT-OSS's experts on x [b, s, H] for the `chosen` [b, s, k]: biased
  /// projections of alternating gate and up columns, the clamped SwiGLU;
  /// [b, s, k, H].
  Value gptOssExperts(Value x, StringRef prefix, Value chosen);
  /// Each slot's row of the per-expert `bias` [E, n]: expert_matmul of a
  /// row of ones with it read as [E, 1, n] (its gradient and its split
  /// over experts are a weight's); [b, s, k, n].
  Value expertBias(Value bias, Value chosen);
  /// min(x, limit), as -max(-x, -limit).
  Value clampAbove(Value x, double limit);
  /// A tensor of `shape` holding `value` everywhere.
  Value fill(ArrayRef<int64_t> shape, double value) {
    return FillOp::create(builder_, loc_, builder_.getDenseI64ArrayAttr(shape),
                          builder_.getF64FloatAttr(value));
  }
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
  return argument("param", name, shape, init, fileShape);
}

Value TransformerBuilder::state(StringRef name, ArrayRef<int64_t> shape) {
  return argument("state", name, shape, "zeros", {});
}

Value TransformerBuilder::argument(StringRef role, StringRef name,
                                   ArrayRef<int64_t> shape, StringRef init,
                                   ArrayRef<int64_t> fileShape) {
  RankedTensorType type = f32(shape);
  argTypes_.push_back(type);
  SmallVector<NamedAttribute> attrs = {
      builder_.getNamedAttr(GraphDialect::kRoleAttrName,
                            builder_.getStringAttr(role)),
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

Value TransformerBuilder::rmsNorm(Value x, StringRef name, int64_t size,
                                  double epsilon) {
  int64_t width = size ? size : config_.hiddenSize;
  Value weight;
  if (config_.unitOffsetNorms) {
    // Gemma: the gain is 1 + weight, the weight zeros at first.
    weight = AddOp::create(
        builder_, loc_, param(name, {width}, "zeros"),
        FillOp::create(builder_, loc_, builder_.getDenseI64ArrayAttr({width}),
                       builder_.getF64FloatAttr(1.0)));
  } else {
    weight = param(name, {width}, "ones");
  }
  return RmsNormOp::create(
      builder_, loc_, x, weight,
      builder_.getF64FloatAttr(epsilon ? epsilon : config_.normEpsilon));
}

Value TransformerBuilder::rope(Value x, int64_t layer, bool interleaved) {
  // Gemma 3's sliding layers rotate with a base of their own.
  bool local = config_.localRopeTheta && layer >= 0 &&
               layer < static_cast<int64_t>(config_.slidingLayers.size()) &&
               config_.slidingLayers[layer];
  Value rotated =
      RopeOp::create(builder_, loc_, x,
                     builder_.getDenseF64ArrayAttr(
                         local ? config_.localRopeFrequencies()
                               : config_.ropeFrequencies(shape_.seq)),
                     builder_.getBoolAttr(false), ArrayAttr(), IntegerAttr(),
                     interleaved ? builder_.getUnitAttr() : UnitAttr());
  double factor = local ? 1.0 : config_.ropeScaling.attentionFactor;
  if (factor == 1)
    return rotated;
  return ScaleOp::create(builder_, loc_, rotated,
                         builder_.getF64FloatAttr(factor));
}

Value TransformerBuilder::attend(Value query, Value key, Value value,
                                 double scale, int64_t layer, Value sinks) {
  auto shapeOf = [](Value v) {
    return llvm::cast<RankedTensorType>(v.getType()).getShape();
  };
  int64_t d = shapeOf(query)[3], dv = shapeOf(value)[3];
  int64_t width = std::max(d, dv);
  // Zeros after the features change no score and no output feature.
  auto padTo = [&](Value v, int64_t from) -> Value {
    if (from == width)
      return v;
    return PadOp::create(builder_, loc_, v, ArrayRef<int64_t>{0, 0, 0, 0},
                         ArrayRef<int64_t>{0, 0, 0, width - from})
        .getResult();
  };
  // A sliding window that covers the sequence is causal attention.
  std::optional<int64_t> window = config_.windowOf(layer);
  IntegerAttr windowAttr;
  if (window && *window < shape_.seq)
    windowAttr = builder_.getI64IntegerAttr(*window);
  FloatAttr softcap = config_.attentionSoftcap
                          ? builder_.getF64FloatAttr(config_.attentionSoftcap)
                          : FloatAttr();
  Value result = AttentionOp::create(
      builder_, loc_, padTo(query, d), padTo(key, d), padTo(value, dv), Value(),
      sinks, builder_.getF64FloatAttr(scale), builder_.getBoolAttr(true),
      ArrayAttr(), IntegerAttr(), windowAttr, softcap);
  if (dv == width)
    return result;
  SmallVector<int64_t> sizes(shapeOf(result));
  sizes[3] = dv;
  return SliceOp::create(builder_, loc_, result, ArrayRef<int64_t>{0, 0, 0, 0},
                         sizes);
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
      AttentionOp::create(builder_, loc_, query, key, value, Value(), Value(),
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
  int64_t f = config_.intermediateSize;
  std::string prefix = llvm::formatv("model.layers.{0}", layer).str();
  loc_ = NameLoc::get(builder_.getStringAttr(prefix));
  partMarker_.setPart(PartAttr::getLayer(builder_.getContext(), layer));

  // Gemma 2 normalizes each branch's output too ("sandwich" norms): its
  // post_attention_layernorm is the attention's output norm, and
  // pre_feedforward_layernorm the MLP's input norm. OLMo 2 normalizes the
  // outputs alone.
  bool sandwich = config_.sandwichNorms;
  bool outputs = sandwich || config_.outputNormsOnly;
  Value hidden = config_.outputNormsOnly
                     ? x
                     : rmsNorm(x, prefix + ".input_layernorm.weight");
  Value output = config_.isLatent() ? latentAttention(hidden, prefix, layer)
                                    : attention(hidden, prefix, layer);
  if (outputs)
    output = rmsNorm(output, prefix + ".post_attention_layernorm.weight");
  x = AddOp::create(builder_, loc_, x, output);

  hidden =
      config_.outputNormsOnly
          ? x
          : rmsNorm(x,
                    prefix + (sandwich ? ".pre_feedforward_layernorm.weight"
                                       : ".post_attention_layernorm.weight"));
  Value mlp = config_.isSparseLayer(layer) ? expertsMlp(hidden, prefix)
                                           : swiGlu(hidden, prefix + ".mlp", f);
  if (outputs)
    mlp = rmsNorm(mlp, prefix + ".post_feedforward_layernorm.weight");
  return AddOp::create(builder_, loc_, x, mlp);
}

Value TransformerBuilder::attention(Value hidden, StringRef prefix,
                                    int64_t layer) {
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t hq = config_.numHeads, hkv = config_.numKvHeads;
  int64_t d = config_.headDim;
  std::string normal = normalInit(config_.initializerRange);
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
  Value q, k, v;
  if (config_.fusedProjections) {
    // Phi-3: one qkv_proj, its rows the query's, then the key's, then the
    // value's.
    Value fused = param((prefix + ".self_attn.qkv_proj.weight").str(),
                        {(hq + 2 * hkv) * d, e}, normal);
    auto rows = [&](int64_t first, int64_t count) {
      return linear(hidden,
                    SliceOp::create(builder_, loc_, fused,
                                    ArrayRef<int64_t>{first, 0},
                                    ArrayRef<int64_t>{count, e}),
                    true);
    };
    q = rows(0, hq * d);
    k = rows(hq * d, hkv * d);
    v = rows((hq + hkv) * d, hkv * d);
  } else {
    q = project("q_proj", hq * d);
    k = project("k_proj", hkv * d);
    v = project("v_proj", hkv * d);
  }
  // OLMoE, OLMo 2: the whole projections normalized, all heads together.
  if (config_.projectionNorm) {
    q = rmsNorm(q, (prefix + ".self_attn.q_norm.weight").str(), hq * d);
    k = rmsNorm(k, (prefix + ".self_attn.k_norm.weight").str(), hkv * d);
  }
  Value qHeads = reshape(q, {b, s, hq, d}), kHeads = reshape(k, {b, s, hkv, d});
  // Qwen3: each head's query and key normalized over head_dim.
  if (config_.queryKeyNorm) {
    qHeads = rmsNorm(qHeads, (prefix + ".self_attn.q_norm.weight").str(), d);
    kHeads = rmsNorm(kHeads, (prefix + ".self_attn.k_norm.weight").str(), d);
  }
  double scale = config_.attentionScale ? config_.attentionScale
                                        : 1.0 / std::sqrt(double(d));
  // GPT-OSS: a sink per head.
  Value sinks = config_.attentionSinks
                    ? param((prefix + ".self_attn.sinks").str(), {hq}, normal)
                    : Value();
  Value result = attend(rope(qHeads, layer), rope(kHeads, layer),
                        reshape(v, {b, s, hkv, d}), scale, layer, sinks);
  // (Made in the checkpoints' order: the weight, then the bias.)
  Value outputWeight =
      param((prefix + ".self_attn.o_proj.weight").str(), {e, hq * d}, normal);
  Value outputBias =
      config_.outputBias
          ? param((prefix + ".self_attn.o_proj.bias").str(), {e}, "zeros")
          : Value();
  return linear(reshape(result, {b, s, hq * d}), outputWeight, true,
                outputBias);
}

Value TransformerBuilder::latentAttention(Value hidden, StringRef prefix,
                                          int64_t layer) {
  const TransformerConfig::LatentAttention &latent = config_.latent;
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t h = config_.numHeads, dn = latent.nopeDim, dr = latent.ropeDim,
          dv = latent.valueDim, d = dn + dr;
  std::string normal = normalInit(config_.initializerRange);
  std::string attn = (prefix + ".self_attn.").str();
  auto weight = [&](StringRef name, int64_t rows, int64_t columns) {
    return param(attn + name.str() + ".weight", {rows, columns}, normal);
  };
  // transformers' DeepseekV3RMSNorm of the latents keeps its default
  // epsilon, not rms_norm_eps.
  constexpr double kLatentNormEpsilon = 1e-6;
  auto slice = [&](Value v, int64_t offset, int64_t size) {
    SmallVector<int64_t> sizes(
        llvm::cast<RankedTensorType>(v.getType()).getShape());
    SmallVector<int64_t> offsets(sizes.size(), 0);
    offsets.back() = offset;
    sizes.back() = size;
    return SliceOp::create(builder_, loc_, v, offsets, sizes).getResult();
  };
  // DeepSeek rotates its interleaved pairs: both the queries' and the
  // keys' rotated features keep that order, so their products are those
  // of transformers' de-interleaved ones.
  auto rotate = [&](Value v) { return rope(v, -1, latent.interleaved); };

  // Queries: through the rank-q_lora_rank bottleneck, or one projection.
  Value q;
  if (latent.queryRank) {
    Value compressed = linear(hidden, weight("q_a_proj", latent.queryRank, e),
                              /*weightIsOutIn=*/true);
    compressed = rmsNorm(compressed, attn + "q_a_layernorm.weight",
                         latent.queryRank, kLatentNormEpsilon);
    q = linear(compressed, weight("q_b_proj", h * d, latent.queryRank), true);
  } else {
    q = linear(hidden, weight("q_proj", h * d, e), true);
  }
  Value qHeads = reshape(q, {b, s, h, d});
  Value query = ConcatOp::create(
      builder_, loc_,
      ValueRange{slice(qHeads, 0, dn), rotate(slice(qHeads, dn, dr))}, 3);

  // Keys and values: one latent (normalized) and one rotated key part
  // every head shares.
  Value compressed =
      linear(hidden, weight("kv_a_proj_with_mqa", latent.kvRank + dr, e), true);
  Value kvLatent = rmsNorm(slice(compressed, 0, latent.kvRank),
                           attn + "kv_a_layernorm.weight", latent.kvRank,
                           kLatentNormEpsilon);
  Value sharedKey =
      rotate(reshape(slice(compressed, latent.kvRank, dr), {b, s, 1, dr}));
  Value kv = reshape(
      linear(kvLatent, weight("kv_b_proj", h * (dn + dv), latent.kvRank), true),
      {b, s, h, dn + dv});
  Value key = ConcatOp::create(
      builder_, loc_,
      ValueRange{slice(kv, 0, dn),
                 BroadcastToOp::create(builder_, loc_, sharedKey,
                                       ArrayRef<int64_t>{b, s, h, dr})},
      3);
  Value value = slice(kv, dn, dv);

  double scale = config_.ropeScaling.softmaxFactor / std::sqrt(double(d));
  Value result = attend(query, key, value, scale, layer);
  return linear(reshape(result, {b, s, h * dv}), weight("o_proj", e, h * dv),
                true);
}

Value TransformerBuilder::swiGlu(Value x, StringRef prefix,
                                 int64_t intermediate) {
  int64_t e = config_.hiddenSize, f = intermediate;
  std::string normal = normalInit(config_.initializerRange);
  Value gate, up;
  if (config_.fusedProjections) {
    // Phi-3: one gate_up_proj, the gate's rows, then the up projection's.
    Value fused =
        param((prefix + ".gate_up_proj.weight").str(), {2 * f, e}, normal);
    auto rows = [&](int64_t first) {
      return linear(x,
                    SliceOp::create(builder_, loc_, fused,
                                    ArrayRef<int64_t>{first, 0},
                                    ArrayRef<int64_t>{f, e}),
                    true);
    };
    gate = rows(0);
    up = rows(f);
  } else {
    gate = linear(
        x, param((prefix + ".gate_proj.weight").str(), {f, e}, normal), true);
    up = linear(x, param((prefix + ".up_proj.weight").str(), {f, e}, normal),
                true);
  }
  Value activation =
      config_.activation == TransformerConfig::Activation::GeluTanh
          ? GeluTanhOp::create(builder_, loc_, gate).getResult()
          : SiluOp::create(builder_, loc_, gate).getResult();
  Value activated = MulOp::create(builder_, loc_, activation, up);
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
  // The router: softmax (DeepSeek-V3: sigmoid) scores of [b, s, E]
  // logits, the top k (DeepSeek-V3: by score + e_score_correction_bias,
  // among the best groups' experts). GPT-OSS's router has a bias.
  std::string router = prefix + (experts.gptOss ? ".router" : ".gate");
  Value routerWeight = param(router + ".weight", {count, e}, normal);
  Value routerBias =
      experts.gptOss ? param(router + ".bias", {count}, "zeros") : Value();
  Value logits = linear(x, routerWeight, true, routerBias);
  // DeepSeek-V3's router computes in fp32 under mixed precision too (the
  // hidden states cast up, its weight kept fp32), as transformers does.
  if (experts.correctionBias)
    logits.getDefiningOp()->setAttr(GraphDialect::kPrecisionAttrName,
                                    builder_.getStringAttr("f32"));
  Value bias = experts.correctionBias
                   ? state(prefix + ".gate.e_score_correction_bias", {count})
                   : Value();
  bool grouped = experts.groups > 1;
  auto route = MoeRouteOp::create(
      builder_, loc_, logits, bias, builder_.getI64IntegerAttr(k),
      experts.sigmoidScores ? builder_.getStringAttr("sigmoid") : StringAttr(),
      experts.normalize ? builder_.getUnitAttr() : UnitAttr(),
      experts.routedScaling != 1
          ? builder_.getF64FloatAttr(experts.routedScaling)
          : FloatAttr(),
      grouped ? builder_.getI64IntegerAttr(experts.groups) : IntegerAttr(),
      grouped ? builder_.getI64IntegerAttr(experts.topGroups) : IntegerAttr(),
      IntegerAttr());
  Value weights = route.getWeights(), chosen = route.getExperts();
  Value down;
  if (experts.gptOss) {
    down = gptOssExperts(x, prefix, chosen);
  } else {
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
                                        /*transpose_rhs=*/true, ArrayAttr(),
                                        StringAttr());
    Value up = ExpertMatmulOp::create(builder_, loc_, x, upWeight, chosen,
                                      /*transpose_rhs=*/true, ArrayAttr(),
                                      StringAttr());
    Value activated =
        MulOp::create(builder_, loc_, SiluOp::create(builder_, loc_, gate), up);
    down = ExpertMatmulOp::create(builder_, loc_, activated, downWeight, chosen,
                                  /*transpose_rhs=*/true, ArrayAttr(),
                                  StringAttr());
  }
  // The slots [b, s, k, E] weighted and summed in slot order.
  Value weighted =
      MulOp::create(builder_, loc_, down, reshape(weights, {b, s, k, 1}));
  Value output = ReduceSumOp::create(builder_, loc_, weighted,
                                     ArrayRef<int64_t>{2}, false);
  if (experts.sharedIntermediateSize) {
    // The shared expert; Qwen2-MoE's scaled by a sigmoid gate of the token.
    Value shared = swiGlu(x, prefix + "." + experts.sharedName,
                          experts.sharedIntermediateSize);
    if (experts.sharedGate)
      shared = MulOp::create(
          builder_, loc_,
          SigmoidOp::create(builder_, loc_,
                            linear(x,
                                   param(prefix + ".shared_expert_gate.weight",
                                         {1, e}, normal),
                                   true)),
          shared);
    output = AddOp::create(builder_, loc_, output, shared);
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

Value TransformerBuilder::expertBias(Value bias, Value chosen) {
  auto shape = llvm::cast<RankedTensorType>(bias.getType()).getShape();
  Value ones = fill({shape_.batch, shape_.seq, 1}, 1.0);
  return ExpertMatmulOp::create(
      builder_, loc_, ones, reshape(bias, {shape[0], 1, shape[1]}), chosen,
      /*transpose_rhs=*/false, ArrayAttr(), StringAttr());
}

Value TransformerBuilder::clampAbove(Value x, double limit) {
  Value bound = fill({1}, -limit);
  return NegOp::create(builder_, loc_,
                       MaximumOp::create(builder_, loc_,
                                         NegOp::create(builder_, loc_, x),
                                         bound));
}

Value TransformerBuilder::gptOssExperts(Value x, StringRef prefix,
                                        Value chosen) {
  const TransformerConfig::Experts &experts = config_.experts;
  int64_t b = shape_.batch, s = shape_.seq, e = config_.hiddenSize;
  int64_t count = experts.count, k = experts.topK, f = experts.intermediateSize;
  std::string normal = normalInit(config_.initializerRange);
  std::string base = (prefix + ".experts.").str();
  // The Hub's stacked tensors, read as x W.
  Value gateUp = param(base + "gate_up_proj", {count, e, 2 * f}, normal);
  Value gateUpBias = param(base + "gate_up_proj_bias", {count, 2 * f}, "zeros");
  Value downWeight = param(base + "down_proj", {count, f, e}, normal);
  Value downBias = param(base + "down_proj_bias", {count, e}, "zeros");
  Value projected =
      AddOp::create(builder_, loc_,
                    ExpertMatmulOp::create(builder_, loc_, x, gateUp, chosen,
                                           /*transpose_rhs=*/false, ArrayAttr(),
                                           StringAttr()),
                    expertBias(gateUpBias, chosen));
  // Gate and up in alternating columns: pairs (gate, up) per feature.
  Value pairs = reshape(projected, {b, s, k, f, 2});
  auto column = [&](int64_t index) {
    return reshape(SliceOp::create(builder_, loc_, pairs,
                                   ArrayRef<int64_t>{0, 0, 0, 0, index},
                                   ArrayRef<int64_t>{b, s, k, f, 1}),
                   {b, s, k, f});
  };
  double limit = experts.swigluLimit;
  Value gate = clampAbove(column(0), limit);
  Value up = clampAbove(
      MaximumOp::create(builder_, loc_, column(1), fill({1}, -limit)), limit);
  Value glu = MulOp::create(
      builder_, loc_, gate,
      SigmoidOp::create(
          builder_, loc_,
          ScaleOp::create(builder_, loc_, gate,
                          builder_.getF64FloatAttr(experts.swigluAlpha))));
  Value upPlusOne = AddOp::create(builder_, loc_, up, fill({1}, 1.0));
  Value activated = MulOp::create(builder_, loc_, upPlusOne, glu);
  return AddOp::create(builder_, loc_,
                       ExpertMatmulOp::create(
                           builder_, loc_, activated, downWeight, chosen,
                           /*transpose_rhs=*/false, ArrayAttr(), StringAttr()),
                       expertBias(downBias, chosen));
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
  // Gemma scales the embeddings by sqrt(hidden_size), rounded to fp32 as
  // transformers' normalizer is.
  if (config_.scaleEmbeddings)
    x = ScaleOp::create(
        builder_, loc_, x,
        builder_.getF64FloatAttr(static_cast<float>(std::sqrt(double(e)))));
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
  // Gemma 2 soft-caps the logits: c tanh(logits / c).
  if (double cap = config_.logitSoftcap)
    logits = ScaleOp::create(
        builder_, loc_,
        TanhOp::create(builder_, loc_,
                       ScaleOp::create(builder_, loc_, logits,
                                       builder_.getF64FloatAttr(1 / cap))),
        builder_.getF64FloatAttr(cap));
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
