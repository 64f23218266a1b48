//===- Safetensors.cpp - Reading and writing .safetensors files -----------===//

#include "trellis/Runtime/Safetensors.h"

#include "trellis/Common/FileKind.h"
#include "trellis/Common/HalfFloat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <tuple>

namespace trellis::runtime {

using json = nlohmann::json;

namespace {

/// Bytes per element of a dtype Trellis reads and writes; 0 for others.
size_t storedWidth(const std::string &dtype) {
  if (dtype == "F32")
    return 4;
  if (dtype == "F16" || dtype == "BF16")
    return 2;
  return 0;
}

} // namespace

StatusOr<SafetensorsFile> readSafetensors(const std::string &path) {
  std::string bytes;
  // Read whole (the trainer holds every parameter anyway); the size is
  // bounded by the file's own, which the memory must hold.
  if (std::string why =
          readRegularFile(path, bytes, std::numeric_limits<int64_t>::max());
      !why.empty())
    return Status::error("cannot read '" + path + "': it " + why +
                         ", expected a .safetensors file");
  int64_t size = static_cast<int64_t>(bytes.size());
  auto fail = [&](const std::string &message) {
    return Status::error(path + ": " + message);
  };
  if (size < 8)
    return fail("truncated: " + std::to_string(size) +
                " bytes, expected at least an 8-byte header length");
  uint64_t headerSize = 0;
  std::memcpy(&headerSize, bytes.data(), 8);
  if (headerSize > static_cast<uint64_t>(size - 8))
    return fail("header length " + std::to_string(headerSize) +
                " exceeds the file (" + std::to_string(size) + " bytes)");
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + headerSize,
                            nullptr, /*allow_exceptions=*/false);
  if (!header.is_object())
    return fail("malformed JSON header");
  const char *data = bytes.data() + 8 + headerSize;
  uint64_t dataSize = size - 8 - headerSize;

  SafetensorsFile file;
  // Each tensor's byte range, to refuse two that share bytes (as the
  // reference safetensors does): one write would change both.
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
  for (auto &[name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_object())
        for (auto &[key, value] : entry.items())
          if (value.is_string())
            file.metadata[key] = value.get<std::string>();
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") ||
        !entry.contains("shape") || !entry.contains("data_offsets") ||
        !entry["dtype"].is_string() || !entry["shape"].is_array() ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      return fail("tensor \"" + name + "\": malformed entry");
    std::string dtype = entry["dtype"].get<std::string>();
    size_t width = storedWidth(dtype);
    if (!width)
      return fail("tensor \"" + name + "\": unsupported dtype " + dtype +
                  " (expected F32, F16 or BF16)");
    SafetensorsEntry tensor;
    tensor.dtype = dtype;
    uint64_t count = 1;
    for (const json &dim : entry["shape"]) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (1ull << 36))
        return fail("tensor \"" + name + "\": malformed shape");
      tensor.shape.push_back(dim.get<int64_t>());
      count *= dim.get<uint64_t>();
      if (count > (1ull << 36))
        return fail("tensor \"" + name + "\": too many elements");
    }
    const json &offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      return fail("tensor \"" + name + "\": malformed data_offsets");
    uint64_t begin = offsets[0].get<uint64_t>(),
             end = offsets[1].get<uint64_t>();
    if (begin > end || end > dataSize || end - begin != count * width)
      return fail("tensor \"" + name + "\": data_offsets [" +
                  std::to_string(begin) + ", " + std::to_string(end) +
                  ") do not hold " + std::to_string(count) + " " + dtype +
                  " values within " + std::to_string(dataSize) + " data bytes");
    if (begin < end)
      ranges.emplace_back(begin, end, name);
    tensor.values.resize(count);
    const char *source = data + begin;
    if (width == 4) {
      std::memcpy(tensor.values.data(), source, count * 4);
    } else {
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, source + 2 * i, 2);
        tensor.values[i] =
            dtype == "F16" ? halfToFloat(bits) : bfloat16ToFloat(bits);
      }
    }
    file.tensors[name] = std::move(tensor);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto &[begin, end, name] = ranges[i];
    const auto &[priorBegin, priorEnd, prior] = ranges[i - 1];
    if (begin < priorEnd)
      return fail("tensor \"" + name + "\": data_offsets [" +
                  std::to_string(begin) + ", " + std::to_string(end) +
                  ") overlap tensor \"" + prior + "\"'s [" +
                  std::to_string(priorBegin) + ", " +
                  std::to_string(priorEnd) +
                  "): expected each tensor in bytes of its own");
  }
  return file;
}

Status writeSafetensors(const std::string &path, const SafetensorsFile &file) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto &[name, tensor] : file.tensors) {
    size_t width = storedWidth(tensor.dtype);
    if (!width)
      return Status::error("cannot write tensor \"" + name + "\" as " +
                           tensor.dtype + ": expected F32, F16 or BF16");
    uint64_t bytes = tensor.values.size() * width;
    header[name] = {{"dtype", tensor.dtype},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!file.metadata.empty())
    header["__metadata__"] = file.metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string temporary = path + ".tmp";
  {
    errno = 0;
    std::ofstream stream(temporary, std::ios::binary | std::ios::trunc);
    if (!stream)
      return Status::error("cannot write '" + temporary +
                           "': " + std::strerror(errno));
    uint64_t headerSize = text.size();
    stream.write(reinterpret_cast<const char *>(&headerSize), 8);
    stream.write(text.data(), text.size());
    std::vector<uint16_t> narrow;
    for (const auto &[name, tensor] : file.tensors) {
      if (tensor.dtype == "F32") {
        stream.write(reinterpret_cast<const char *>(tensor.values.data()),
                     tensor.values.size() * 4);
        continue;
      }
      narrow.resize(tensor.values.size());
      for (size_t i = 0; i < narrow.size(); ++i)
        narrow[i] = tensor.dtype == "F16" ? floatToHalf(tensor.values[i])
                                          : floatToBfloat16(tensor.values[i]);
      stream.write(reinterpret_cast<const char *>(narrow.data()),
                   narrow.size() * 2);
    }
    if (!stream.flush()) {
      // The reason the file system gave (a full disk: ENOSPC).
      std::string reason = std::strerror(errno);
      stream.close();
      std::remove(temporary.c_str());
      return Status::error("failed writing '" + temporary + "': " + reason);
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    return Status::error("cannot rename '" + temporary + "' to '" + path + "'");
  return Status::success();
}

bool isStackedName(const std::string &name) {
  size_t star = name.find('*');
  return star != std::string::npos &&
         name.find('*', star + 1) == std::string::npos;
}

std::string stackedPieceName(const std::string &name, int64_t index) {
  size_t star = name.find('*');
  return name.substr(0, star) + std::to_string(index) + name.substr(star + 1);
}

StatusOr<SafetensorsEntry>
readStackedTensor(const SafetensorsFile &file, const std::string &path,
                  const std::string &name, const std::vector<int64_t> &shape) {
  SafetensorsEntry stacked;
  stacked.shape = shape;
  std::vector<int64_t> pieceShape(shape.begin() + 1, shape.end());
  int64_t pieceSize = 1;
  for (int64_t size : pieceShape)
    pieceSize *= size;
  stacked.values.reserve(static_cast<size_t>(pieceSize * shape[0]));
  for (int64_t index = 0; index < shape[0]; ++index) {
    std::string piece = stackedPieceName(name, index);
    auto it = file.tensors.find(piece);
    if (it == file.tensors.end())
      return Status::error(path + ": missing \"" + piece + "\" (slice " +
                           std::to_string(index) + " of " +
                           std::to_string(shape[0]) + " of \"" + name + "\")");
    if (it->second.shape != pieceShape) {
      std::string found, expected;
      for (int64_t s : it->second.shape)
        found += (found.empty() ? "" : "x") + std::to_string(s);
      for (int64_t s : pieceShape)
        expected += (expected.empty() ? "" : "x") + std::to_string(s);
      return Status::error(path + ": tensor \"" + piece + "\" has shape [" +
                           found + "], the model expects [" + expected + "]");
    }
    stacked.values.insert(stacked.values.end(), it->second.values.begin(),
                          it->second.values.end());
  }
  // Pieces beyond the model's count belong to another model.
  std::string extra = stackedPieceName(name, shape[0]);
  if (file.tensors.count(extra))
    return Status::error(path + ": tensor \"" + extra + "\" is slice " +
                         std::to_string(shape[0]) + " of \"" + name +
                         "\", which the model has " + std::to_string(shape[0]) +
                         " of");
  return stacked;
}

void splitStackedTensors(SafetensorsFile &file) {
  std::map<std::string, SafetensorsEntry> split;
  for (auto &[name, entry] : file.tensors) {
    if (!isStackedName(name) || entry.shape.empty()) {
      split[name] = std::move(entry);
      continue;
    }
    int64_t count = entry.shape[0];
    size_t pieceSize = count ? entry.values.size() / count : 0;
    for (int64_t index = 0; index < count; ++index) {
      SafetensorsEntry piece;
      piece.shape.assign(entry.shape.begin() + 1, entry.shape.end());
      piece.dtype = entry.dtype;
      piece.values.assign(entry.values.begin() + index * pieceSize,
                          entry.values.begin() + (index + 1) * pieceSize);
      split[stackedPieceName(name, index)] = std::move(piece);
    }
  }
  file.tensors = std::move(split);
}

} // namespace trellis::runtime
