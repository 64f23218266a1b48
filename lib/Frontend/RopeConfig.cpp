//===- RopeConfig.cpp - The rotary embedding's fields of a config ---------===//
//
// Reads the rotary embedding's theta and scaling (linear, llama3, yarn) from
// rope_theta and rope_scaling, or from transformers 5's rope_parameters.
//
//===----------------------------------------------------------------------===//

#include "FamilyReaders.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <string>

using namespace trellis;
using namespace trellis::frontend;

namespace {

using RopeScaling = TransformerConfig::RopeScaling;

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
  if (type == "longrope") {
    // LongRoPE as transformers' _compute_longrope_parameters computes it.
    scaling.kind = RopeScaling::Kind::LongRope;
    TRY_ASSIGN(scaling.originalMaxPositions,
               sub.integerOr("original_max_position_embeddings",
                             config.originalMaxPositions, 0));
    if (scaling.originalMaxPositions < 1)
      return configError(llvm::formatv(
          "field \"{0}\": expected original_max_position_embeddings for "
          "rope_type \"longrope\" (there or beside it)",
          ropeField));
    TRY_ASSIGN(scaling.shortFactors, sub.positiveNumbers("short_factor"));
    TRY_ASSIGN(scaling.longFactors, sub.positiveNumbers("long_factor"));
    size_t pairs = static_cast<size_t>(config.ropeDim() / 2);
    if (scaling.shortFactors.size() != pairs ||
        scaling.longFactors.size() != pairs)
      return configError(llvm::formatv(
          "field \"{0}\": expected short_factor and long_factor of {1} "
          "entries (one per rotated pair), found {2} and {3}",
          ropeField, pairs, scaling.shortFactors.size(),
          scaling.longFactors.size()));
    TRY_ASSIGN(scaling.factor,
               sub.numberOr("factor", double(config.maxPositions) /
                                          scaling.originalMaxPositions));
    double attentionFactor = 0;
    TRY_ASSIGN(attentionFactor, sub.nonNegativeOr("attention_factor", 0));
    scaling.attentionFactor =
        attentionFactor ? attentionFactor
        : scaling.factor <= 1
            ? 1.0
            : std::sqrt(1 + std::log(scaling.factor) /
                                std::log(double(scaling.originalMaxPositions)));
    return llvm::Error::success();
  }
  if (type != "yarn")
    return configError(llvm::formatv(
        "field \"{0}\": expected rope_type \"default\", \"linear\", "
        "\"llama3\", \"yarn\" or \"longrope\", found \"{1}\"",
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

} // namespace

llvm::Error frontend::readRope(ConfigReader &reader,
                               TransformerConfig &config) {
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
