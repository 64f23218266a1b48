//===- TokenSource.cpp - Training batches of token ids --------------------===//

#include "trellis/Runtime/TokenSource.h"

#include "TokenStream.h"
#include "trellis/Runtime/Initializer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace trellis::runtime {

namespace {

class SyntheticTokens : public TokenSource {
public:
  SyntheticTokens(uint64_t seed, int64_t vocab, bool repeat)
      : seed_(seed), vocab_(vocab), repeat_(repeat) {}

  Status fill(const BatchPosition &at, int64_t batch, int64_t seq,
              int32_t *tokens, int32_t *targets) override {
    uint64_t batchKey = mix64(seed_ ^ mix64(repeat_ ? 0 : at.step + 1));
    for (int64_t row = 0; row < batch; ++row) {
      uint64_t rowKey = mix64(batchKey ^ mix64(row));
      int64_t token = static_cast<int64_t>(rowKey % vocab_);
      int64_t stride = 1 + static_cast<int64_t>(mix64(rowKey) % 7);
      for (int64_t s = 0; s <= seq; ++s) {
        if (s < seq)
          tokens[row * seq + s] = static_cast<int32_t>(token);
        if (s > 0)
          targets[row * seq + s - 1] = static_cast<int32_t>(token);
        token = (token + stride) % vocab_;
      }
    }
    return Status::success();
  }

  std::string identity() const override {
    return repeat_ ? "repeat" : "synthetic";
  }

private:
  uint64_t seed_;
  int64_t vocab_;
  bool repeat_;
};

/// Windows of seq + 1 ids from the components of --data.
class BlendedTokens : public TokenSource {
public:
  BlendedTokens(std::vector<std::unique_ptr<data::TokenStream>> streams,
                std::vector<double> weights, bool sequential, uint64_t seed)
      : streams_(std::move(streams)), weights_(std::move(weights)),
        sequential_(sequential), seed_(seed), counts_(streams_.size(), 0) {}

  std::string identity() const override {
    std::string text;
    if (streams_.size() == 1) {
      text = streams_[0]->identity();
    } else {
      for (size_t d = 0; d < streams_.size(); ++d) {
        char weight[32];
        std::snprintf(weight, sizeof(weight), "%.6g", weights_[d]);
        text += (d ? " + " : "blend of ") + std::string(weight) + " x " +
                streams_[d]->identity();
      }
    }
    return sequential_ ? text + ", sequential" : text;
  }

  Status checkWindows(int64_t seq) const override {
    for (const auto &stream : streams_)
      if (stream->size() < seq + 1)
        return Status::error(
            (streams_.size() == 1 ? std::string("token file")
                                  : "token data '" + stream->path() + "'") +
            " holds " + std::to_string(stream->size()) +
            " tokens; a window of seq + 1 = " + std::to_string(seq + 1) +
            " needs more");
    return Status::success();
  }

  int64_t distinctWindows(int64_t seq) const override {
    int64_t windows = 0;
    for (const auto &stream : streams_)
      windows +=
          sequential_ ? (stream->size() - 1) / seq : stream->size() - seq;
    return windows;
  }

  Status fill(const BatchPosition &at, int64_t batch, int64_t seq,
              int32_t *tokens, int32_t *targets) override {
    TRELLIS_RETURN_IF_ERROR(checkWindows(seq));
    std::vector<int32_t> window(seq + 1);
    for (int64_t row = 0; row < batch; ++row) {
      auto [component, index] = windowOf(at.window + row);
      const data::TokenStream &stream = *streams_[component];
      int64_t start = 0;
      if (sequential_) {
        // Consecutive windows share one id: the last target, the next
        // window's first token.
        int64_t windows = (stream.size() - 1) / seq;
        start = (index % windows) * seq;
      } else if (streams_.size() == 1) {
        start = static_cast<int64_t>(mix64(seed_ ^ mix64(at.step + 1) ^
                                           mix64(~static_cast<uint64_t>(row))) %
                                     (stream.size() - seq));
      } else {
        start = static_cast<int64_t>(
            mix64(seed_ ^ mix64(component + 1) ^ mix64(~index)) %
            (stream.size() - seq));
      }
      TRELLIS_RETURN_IF_ERROR(stream.read(start, seq + 1, window.data()));
      std::copy(window.begin(), window.end() - 1, tokens + row * seq);
      std::copy(window.begin() + 1, window.end(), targets + row * seq);
    }
    return Status::success();
  }

private:
  /// The component window `window` of the run comes from, and how many
  /// windows that component gave before it: the component furthest below
  /// its share (Megatron's blend), counted from the start of the run.
  std::pair<size_t, int64_t> windowOf(int64_t window) {
    if (streams_.size() == 1)
      return {0, window};
    if (window < next_) {
      next_ = 0;
      std::fill(counts_.begin(), counts_.end(), 0);
    }
    for (;; ++next_) {
      size_t best = 0;
      double bestDeficit = -1e300;
      for (size_t d = 0; d < streams_.size(); ++d) {
        double deficit = weights_[d] * static_cast<double>(next_ + 1) -
                         static_cast<double>(counts_[d]);
        if (deficit > bestDeficit) {
          best = d;
          bestDeficit = deficit;
        }
      }
      int64_t index = counts_[best]++;
      if (next_ == window) {
        ++next_;
        return {best, index};
      }
    }
  }

  std::vector<std::unique_ptr<data::TokenStream>> streams_;
  std::vector<double> weights_;
  bool sequential_;
  uint64_t seed_;
  /// The next window of the run windowOf has not assigned, and each
  /// component's windows before it.
  int64_t next_ = 0;
  std::vector<int64_t> counts_;
};

} // namespace

std::unique_ptr<TokenSource>
makeSyntheticTokens(uint64_t seed, int64_t vocabSize, bool repeat) {
  return std::make_unique<SyntheticTokens>(seed, vocabSize, repeat);
}

bool isDataOrder(const std::string &order) {
  return order == "random" || order == "sequential";
}

StatusOr<std::vector<DataComponent>>
parseDataComponents(const std::string &text) {
  // A blend: every comma-separated entry is WEIGHT:PATH.
  auto weightOf = [](const std::string &entry) -> std::optional<double> {
    size_t colon = entry.find(':');
    if (colon == std::string::npos || colon == 0)
      return std::nullopt;
    std::string number = entry.substr(0, colon);
    char *end = nullptr;
    double weight = std::strtod(number.c_str(), &end);
    if (*end != '\0')
      return std::nullopt;
    return weight;
  };
  if (!weightOf(text))
    return std::vector<DataComponent>{{1.0, text}};
  std::vector<DataComponent> components;
  double total = 0;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string entry = text.substr(
        at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    std::optional<double> weight = weightOf(entry);
    if (!weight || !std::isfinite(*weight) || *weight <= 0 ||
        entry.size() == entry.find(':') + 1)
      return Status::error("--data: expected a blend WEIGHT:PATH,WEIGHT:PATH "
                           "with weights > 0, found the entry '" +
                           entry + "'");
    components.push_back({*weight, entry.substr(entry.find(':') + 1)});
    total += *weight;
  }
  for (DataComponent &component : components)
    component.weight /= total;
  return components;
}

StatusOr<std::unique_ptr<TokenSource>>
openTokenData(const std::string &text, const std::string &dtype,
              const std::string &order, uint64_t seed, int64_t vocabSize) {
  if (!isDataOrder(order))
    return Status::error("expected --data-order random or sequential, found '" +
                         order + "'");
  StatusOr<std::vector<DataComponent>> components = parseDataComponents(text);
  if (!components.ok())
    return components.status();
  std::vector<std::unique_ptr<data::TokenStream>> streams;
  std::vector<double> weights;
  for (const DataComponent &component : *components) {
    StatusOr<std::unique_ptr<data::TokenStream>> stream =
        data::TokenStream::open(component.path, dtype, vocabSize);
    if (!stream.ok())
      return stream.status();
    streams.push_back(std::move(*stream));
    weights.push_back(component.weight);
  }
  return std::unique_ptr<TokenSource>(std::make_unique<BlendedTokens>(
      std::move(streams), std::move(weights), order == "sequential", seed));
}

} // namespace trellis::runtime
