//===- TokenSource.h - Training batches of token ids ------------*- C++ -*-===//
//
// A batch for step k depends only on (seed, k), so a run resumed at step k
// sees the same batches as one that never stopped.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_TOKENSOURCE_H
#define TRELLIS_RUNTIME_TOKENSOURCE_H

#include "trellis/Runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trellis::runtime {

class TokenSource {
public:
  virtual ~TokenSource() = default;
  /// Fills `tokens` and `targets` ([batch, seq] each; targets are tokens
  /// shifted by one position) for training step `step`.
  virtual Status fill(int64_t step, int64_t batch, int64_t seq, int32_t *tokens,
                      int32_t *targets) = 0;
  /// What the batches are drawn from, in one line without the seed (which
  /// ranks compare at rendezvous): "synthetic", "repeat", or "file of N
  /// tokens, crc32 H".
  virtual std::string identity() const = 0;
};

/// A learnable synthetic stream: each row starts at a random token and
/// advances by a per-row random stride modulo the vocabulary. With
/// `repeat`, every step gets the batch of step 0.
std::unique_ptr<TokenSource>
makeSyntheticTokens(uint64_t seed, int64_t vocabSize, bool repeat);

/// Windows of a flat binary file of uint16 or uint32 token ids, at
/// positions drawn from (seed, step, row). Fails if the file is too short
/// for one window or holds an id outside the vocabulary.
StatusOr<std::unique_ptr<TokenSource>> openTokenFile(const std::string &path,
                                                     const std::string &dtype,
                                                     uint64_t seed,
                                                     int64_t vocabSize);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TOKENSOURCE_H
