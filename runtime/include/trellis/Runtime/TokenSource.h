//===- TokenSource.h - Training batches of token ids ------------*- C++ -*-===//
//
// A batch depends only on the seed and its position: the training step
// and the windows (rows) consumed before it. Checkpoints keep that data
// position, so a resumed run reads the same batches as one that never
// stopped.
//
// Token data is one or more components, each a token file or a directory
// of shards (its files in name order, read as one stream), mixed with
// weights as Megatron's data blends: window i of the run goes to the
// component furthest below its share (weight * (i + 1) - windows it got),
// so every prefix of the run holds each component in proportion. Files
// are mapped, not read into memory.
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

/// Where a batch is in the run: its training step, and the windows that
/// earlier batches consumed (the data position).
struct BatchPosition {
  int64_t step = 0;
  int64_t window = 0;
};

class TokenSource {
public:
  virtual ~TokenSource() = default;
  /// Fills `tokens` and `targets` ([batch, seq] each; targets are tokens
  /// shifted by one position) with the batch at `at`: row r is the run's
  /// window `at.window + r`.
  virtual Status fill(const BatchPosition &at, int64_t batch, int64_t seq,
                      int32_t *tokens, int32_t *targets) = 0;
  /// Whether windows of `seq` + 1 tokens can be drawn (every token file
  /// holds one), asked before step 1 so that a short file is found then,
  /// not at the first batch or evaluation drawn from it.
  virtual Status checkWindows(int64_t seq) const {
    (void)seq;
    return Status::success();
  }
  /// How many different windows of `seq` + 1 tokens the source can give
  /// (its files' start positions, or their consecutive windows in the
  /// sequential order); -1 when unbounded (synthetic data).
  virtual int64_t distinctWindows(int64_t seq) const {
    (void)seq;
    return -1;
  }
  /// What the batches are drawn from, in one line without the seed (which
  /// ranks compare at rendezvous): "synthetic", "repeat", "file of N
  /// tokens, crc32 H", or a blend's components and the order.
  virtual std::string identity() const = 0;
};

/// A learnable synthetic stream: each row starts at a random token and
/// advances by a per-row random stride modulo the vocabulary. With
/// `repeat`, every step gets the batch of step 0.
std::unique_ptr<TokenSource>
makeSyntheticTokens(uint64_t seed, int64_t vocabSize, bool repeat);

/// One component of `--data`: a token file or a directory of shards, and
/// its share of the windows.
struct DataComponent {
  double weight = 1;
  std::string path;
};

/// `--data`'s components: "PATH", or a blend "W:PATH,W:PATH,..." with
/// weights > 0 (normalized to sum to 1). An error names the entry that is
/// malformed.
StatusOr<std::vector<DataComponent>>
parseDataComponents(const std::string &text);

/// How windows are taken from a component: "random" (at positions drawn
/// from the seed, the step and the row; with several components, from the
/// seed, the component and its window count) or "sequential" (one after
/// another, each starting where the last ended but one token, from the
/// component's start again at its end).
bool isDataOrder(const std::string &order);

/// Opens `--data`'s token files (uint16 or uint32 ids). Fails, naming the
/// file, when one cannot be read, is not whole ids of `dtype`, holds an id
/// outside the vocabulary, or a directory holds no shards.
StatusOr<std::unique_ptr<TokenSource>>
openTokenData(const std::string &data, const std::string &dtype,
              const std::string &order, uint64_t seed, int64_t vocabSize);

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_TOKENSOURCE_H
