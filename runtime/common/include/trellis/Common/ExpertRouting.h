//===- ExpertRouting.h - A token's expert choice and its gradient -*- C++
//-*-===//
//
// moe_route and moe_route_grad for one token, in fp32 with double sums:
// one definition that the CPU kernels and the CUDA kernels both compile
// (host and device), so every backend routes alike. The caller gives the
// scratch: a thread (or loop iteration) per token.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_COMMON_EXPERTROUTING_H
#define TRELLIS_COMMON_EXPERTROUTING_H

#include "trellis/Common/HostDevice.h"

#include <math.h>
#include <stdint.h>

namespace trellis {

/// The router's attributes (the op table's moe_route row).
struct ExpertRouting {
  int64_t experts = 0;
  int64_t topK = 1;
  bool sigmoid = false;
  bool normalize = false;
  double scaling = 1;
  /// Grouped routing (0: none): experts in `groups` contiguous groups, the
  /// choice among those of the `topGroups` best, a group ranked by the sum
  /// of its `groupTop` (1 or 2) highest.
  int64_t groups = 0, topGroups = 0, groupTop = 2;
};

/// A token's scores from its `experts` logits: softmax (max-shifted, the
/// sum in double) or sigmoid.
TRELLIS_HOST_DEVICE inline void
routeScores(const float *logits, int64_t experts, bool sigmoid, float *scores) {
  if (sigmoid) {
    for (int64_t e = 0; e < experts; ++e)
      scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    return;
  }
  float maximum = logits[0];
  for (int64_t e = 1; e < experts; ++e)
    if (logits[e] > maximum)
      maximum = logits[e];
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    scores[e] = expf(logits[e] - maximum);
    sum += scores[e];
  }
  for (int64_t e = 0; e < experts; ++e)
    scores[e] = static_cast<float>(scores[e] / sum);
}

/// The `k` highest scores' experts in descending order, ties to the lower
/// index.
TRELLIS_HOST_DEVICE inline void topExperts(const float *scores, int64_t experts,
                                           int64_t k, int32_t *chosen) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i)
        taken = taken || chosen[i] == e;
      if (taken)
        continue;
      if (best < 0 || scores[e] > scores[best])
        best = e;
    }
    chosen[j] = static_cast<int32_t>(best);
  }
}

/// DeepSeek's group limit on `choice` [experts]: each of the `groups`
/// contiguous groups ranked by the sum of its `groupTop` (1 or 2) highest
/// entries (DeepSeek-V2's highest, DeepSeek-V3's two highest), the entries
/// outside the `topGroups` best groups (ties to the lower group) set to
/// -inf. `groupScores` [groups] and `keptGroups` [topGroups] are scratch.
TRELLIS_HOST_DEVICE inline void
limitToGroups(float *choice, int64_t experts, int64_t groups, int64_t topGroups,
              int64_t groupTop, float *groupScores, int32_t *keptGroups) {
  int64_t size = experts / groups;
  for (int64_t g = 0; g < groups; ++g) {
    int32_t best[2] = {0, 0};
    topExperts(choice + g * size, size, groupTop, best);
    groupScores[g] = choice[g * size + best[0]];
    if (groupTop == 2)
      groupScores[g] += choice[g * size + best[1]];
  }
  topExperts(groupScores, groups, topGroups, keptGroups);
  for (int64_t g = 0; g < groups; ++g) {
    bool kept = false;
    for (int64_t i = 0; i < topGroups; ++i)
      kept = kept || keptGroups[i] == g;
    if (!kept)
      for (int64_t e = g * size; e < (g + 1) * size; ++e)
        choice[e] = -INFINITY;
  }
}

/// Floats of scratch routeToken needs per token (scores, choice, group
/// scores), and int32s (kept groups).
TRELLIS_HOST_DEVICE inline int64_t routeScratchFloats(const ExpertRouting &r) {
  return 2 * r.experts + r.groups;
}
TRELLIS_HOST_DEVICE inline int64_t routeScratchInts(const ExpertRouting &r) {
  return r.topGroups;
}

/// Routes one token: `weights` [topK] and `chosen` [topK] from `logits`
/// [experts] and the optional score `bias` [experts]. The choice ranks
/// score + bias within the kept groups; the weights are the scores
/// (renormalized over the chosen with `normalize`) times `scaling`.
TRELLIS_HOST_DEVICE inline void routeToken(const ExpertRouting &r,
                                           const float *logits,
                                           const float *bias, float *scratch,
                                           int32_t *intScratch, float *weights,
                                           int32_t *chosen) {
  float *scores = scratch, *choice = scratch + r.experts;
  routeScores(logits, r.experts, r.sigmoid, scores);
  for (int64_t e = 0; e < r.experts; ++e)
    choice[e] = bias ? scores[e] + bias[e] : scores[e];
  if (r.groups)
    limitToGroups(choice, r.experts, r.groups, r.topGroups, r.groupTop,
                  scratch + 2 * r.experts, intScratch);
  topExperts(choice, r.experts, r.topK, chosen);
  double sum = 0;
  for (int64_t j = 0; j < r.topK; ++j)
    sum += scores[chosen[j]];
  for (int64_t j = 0; j < r.topK; ++j) {
    double weight = scores[chosen[j]];
    if (r.normalize)
      weight /= sum;
    weights[j] = static_cast<float>(weight * r.scaling);
  }
}

/// The gradient of one token's `logits` [experts] (`out`) from its
/// weights' gradient `weightsGrad` [topK] and the experts the forward
/// chose, `chosen` [topK] (each in [0, experts)); `scores` [experts] is
/// scratch.
TRELLIS_HOST_DEVICE inline void routeTokenGrad(const ExpertRouting &r,
                                               const float *logits,
                                               const int32_t *chosen,
                                               const float *weightsGrad,
                                               float *scores, float *out) {
  routeScores(logits, r.experts, r.sigmoid, scores);
  double c = r.scaling;
  double sum = 0, weighted = 0;
  for (int64_t j = 0; j < r.topK; ++j)
    sum += scores[chosen[j]];
  if (r.normalize)
    for (int64_t j = 0; j < r.topK; ++j)
      weighted += weightsGrad[j] * scores[chosen[j]];
  // The gradient of each chosen score: w_j = c s_j (/ sum of the chosen
  // scores with normalize); zero for the others.
  auto scoreGrad = [&](int64_t e) {
    for (int64_t j = 0; j < r.topK; ++j)
      if (chosen[j] == e)
        return r.normalize ? c / sum * (weightsGrad[j] - weighted / sum)
                           : c * weightsGrad[j];
    return 0.0;
  };
  if (r.sigmoid) {
    for (int64_t e = 0; e < r.experts; ++e)
      out[e] = static_cast<float>(scoreGrad(e) * scores[e] * (1.0 - scores[e]));
    return;
  }
  // Through the softmax: dl = s (ds - <s, ds>).
  double dot = 0;
  for (int64_t e = 0; e < r.experts; ++e)
    dot += scores[e] * scoreGrad(e);
  for (int64_t e = 0; e < r.experts; ++e)
    out[e] = static_cast<float>(scores[e] * (scoreGrad(e) - dot));
}

} // namespace trellis

#endif // TRELLIS_COMMON_EXPERTROUTING_H
