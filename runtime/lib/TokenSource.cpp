//===- TokenSource.cpp - Training batches of token ids --------------------===//

#include "trellis/Runtime/TokenSource.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Runtime/Initializer.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>

namespace trellis::runtime {

namespace {

class SyntheticTokens : public TokenSource {
public:
  SyntheticTokens(uint64_t seed, int64_t vocab, bool repeat)
      : seed_(seed), vocab_(vocab), repeat_(repeat) {}

  Status fill(int64_t step, int64_t batch, int64_t seq, int32_t *tokens,
              int32_t *targets) override {
    uint64_t batchKey = mix64(seed_ ^ mix64(repeat_ ? 0 : step + 1));
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

class FileTokens : public TokenSource {
public:
  FileTokens(std::vector<uint32_t> ids, uint64_t seed, uint32_t crc32)
      : ids_(std::move(ids)), seed_(seed), crc32_(crc32) {}

  std::string identity() const override {
    char crc[9];
    std::snprintf(crc, sizeof(crc), "%08x", crc32_);
    return "file of " + std::to_string(ids_.size()) + " tokens, crc32 " + crc;
  }

  Status fill(int64_t step, int64_t batch, int64_t seq, int32_t *tokens,
              int32_t *targets) override {
    int64_t windows = static_cast<int64_t>(ids_.size()) - seq;
    if (windows < 1)
      return Status::error("token file holds " + std::to_string(ids_.size()) +
                           " tokens; a window of seq + 1 = " +
                           std::to_string(seq + 1) + " needs more");
    for (int64_t row = 0; row < batch; ++row) {
      int64_t start = static_cast<int64_t>(
          mix64(seed_ ^ mix64(step + 1) ^ mix64(~static_cast<uint64_t>(row))) %
          windows);
      for (int64_t s = 0; s < seq; ++s) {
        tokens[row * seq + s] = static_cast<int32_t>(ids_[start + s]);
        targets[row * seq + s] = static_cast<int32_t>(ids_[start + s + 1]);
      }
    }
    return Status::success();
  }

private:
  std::vector<uint32_t> ids_;
  uint64_t seed_;
  /// Of the file's bytes.
  uint32_t crc32_;
};

} // namespace

std::unique_ptr<TokenSource>
makeSyntheticTokens(uint64_t seed, int64_t vocabSize, bool repeat) {
  return std::make_unique<SyntheticTokens>(seed, vocabSize, repeat);
}

StatusOr<std::unique_ptr<TokenSource>> openTokenFile(const std::string &path,
                                                     const std::string &dtype,
                                                     uint64_t seed,
                                                     int64_t vocabSize) {
  if (dtype != "uint16" && dtype != "uint32")
    return Status::error("expected token dtype uint16 or uint32, found '" +
                         dtype + "'");
  std::string contents;
  if (std::string why = readRegularFile(path, contents); !why.empty())
    return Status::error("cannot open token file '" + path + "': it " + why +
                         ", expected a file of " + dtype + " token ids");
  int64_t bytes = static_cast<int64_t>(contents.size());
  size_t width = dtype == "uint16" ? 2 : 4;
  if (bytes % width != 0)
    return Status::error("token file '" + path + "' has " +
                         std::to_string(bytes) + " bytes, not a multiple of " +
                         std::to_string(width) + " (" + dtype + ")");
  std::vector<uint32_t> ids(bytes / width);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t value = 0;
    std::memcpy(&value, contents.data() + i * width, width);
    if (value >= static_cast<uint64_t>(vocabSize))
      return Status::error(
          "token file '" + path + "': id " + std::to_string(value) +
          " at position " + std::to_string(i) +
          " is outside the vocabulary [0, " + std::to_string(vocabSize) + ")");
    ids[i] = value;
  }
  return std::unique_ptr<TokenSource>(
      std::make_unique<FileTokens>(
          std::move(ids), seed,
          static_cast<uint32_t>(crc32_z(
              crc32(0L, Z_NULL, 0),
              reinterpret_cast<const Bytef *>(contents.data()),
              contents.size()))));
}

} // namespace trellis::runtime
