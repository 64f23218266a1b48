//===- TransformerConfig.cpp - Sizes derived from a TransformerConfig -----===//
//
// What a TransformerConfig's fields imply: the rotary frequencies, the
// parameter count, each layer's sliding window and whether its MLP is a
// mixture of experts.
//
//===----------------------------------------------------------------------===//

#include "trellis/Frontend/TransformerConfig.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

using namespace trellis;

std::vector<double> TransformerConfig::ropeFrequencies(int64_t seq) const {
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
    } else if (scaling.kind == RopeScaling::Kind::LongRope) {
      // transformers computes 1 / (factor * theta^(2i/d)) in float32.
      const std::vector<double> &factors = seq > scaling.originalMaxPositions
                                               ? scaling.longFactors
                                               : scaling.shortFactors;
      float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
      frequency = 1.0f / (static_cast<float>(factors[i]) *
                          std::pow(static_cast<float>(ropeTheta), exponent));
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
    if (outputBias)
      perLayer += e;
    if (attentionSinks)
      perLayer += numHeads;
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
      // GPT-OSS: the router's bias, each expert's biases.
      if (experts.gptOss)
        params += experts.count * (1 + 2 * experts.intermediateSize + e);
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
