//===- SafetensorsTest.cpp - Reading and writing safetensors --------------===//

#include "trellis/Runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

using namespace trellis::runtime;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + name;
}

void writeRaw(const std::string &path, const std::string &header,
              const std::string &data) {
  std::ofstream file(path, std::ios::binary);
  uint64_t size = header.size();
  file.write(reinterpret_cast<const char *>(&size), 8);
  file << header << data;
}

TEST(SafetensorsTest, RoundTrips) {
  SafetensorsFile file;
  file.tensors["w"] = {{2, 3}, {1, 2, 3, 4, 5, 6}};
  file.tensors["b"] = {{3}, {-1, 0.5f, 7}};
  file.tensors["s"] = {{}, {42}};
  file.metadata["trellis_step"] = "25";
  std::string path = tempPath("roundtrip.safetensors");
  ASSERT_TRUE(writeSafetensors(path, file).ok());
  StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->tensors["w"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(read->tensors["w"].values, file.tensors["w"].values);
  EXPECT_EQ(read->tensors["b"].values, file.tensors["b"].values);
  EXPECT_EQ(read->tensors["s"].values, std::vector<float>{42});
  EXPECT_EQ(read->metadata["trellis_step"], "25");
}

TEST(SafetensorsTest, ConvertsHalfPrecision) {
  // bf16 1.0 = 0x3f80, f16 -2.0 = 0xc000.
  std::string path = tempPath("half.safetensors");
  uint16_t bf16 = 0x3f80, f16 = 0xc000;
  std::string data(4, '\0');
  std::memcpy(&data[0], &bf16, 2);
  std::memcpy(&data[2], &f16, 2);
  writeRaw(path,
           R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
           R"("b":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})",
           data);
  StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->tensors["a"].values[0], 1.0f);
  EXPECT_EQ(read->tensors["b"].values[0], -2.0f);
}

TEST(SafetensorsTest, WritesHalfPrecisionRoundedToNearestEven) {
  SafetensorsFile file;
  // 1 + 2^-8 is halfway between two bf16 values: it rounds to 1 (even).
  file.tensors["w"] = {{2}, {1.0f + 0x1p-8f, -3.0f}, "BF16"};
  file.tensors["h"] = {{2}, {65504.0f, 0.1f}, "F16"};
  file.tensors["f"] = {{1}, {0.1f}, "F32"};
  std::string path = tempPath("half-write.safetensors");
  ASSERT_TRUE(writeSafetensors(path, file).ok());
  StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->tensors["w"].dtype, "BF16");
  EXPECT_EQ(read->tensors["w"].values, (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(read->tensors["h"].dtype, "F16");
  EXPECT_EQ(read->tensors["h"].values[0], 65504.0f);
  // fp16's nearest value to 0.1.
  EXPECT_EQ(read->tensors["h"].values[1], 0.0999755859375f);
  EXPECT_EQ(read->tensors["f"].values[0], 0.1f);
  // The header declares what the data holds: 2-byte values (tensors in
  // name order: f, h, w).
  std::ifstream stream(path, std::ios::binary);
  uint64_t headerSize = 0;
  stream.read(reinterpret_cast<char *>(&headerSize), 8);
  std::string header(headerSize, '\0');
  stream.read(&header[0], headerSize);
  EXPECT_NE(header.find(R"("w":{"data_offsets":[8,12],"dtype":"BF16")"),
            std::string::npos)
      << header;

  SafetensorsFile unsupported;
  unsupported.tensors["x"] = {{1}, {1.0f}, "I64"};
  Status status = writeSafetensors(tempPath("i64.safetensors"), unsupported);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "cannot write tensor \"x\" as I64: expected F32, F16 or BF16");
}

TEST(SafetensorsTest, RejectsMalformedFiles) {
  std::string path = tempPath("bad.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("truncated"), std::string::npos);

  writeRaw(path, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
           std::string(8, '\0'));
  read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("do not hold 4 F32 values"),
            std::string::npos)
      << read.status().message();

  writeRaw(path, R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("unsupported dtype I64"),
            std::string::npos);

  writeRaw(path, "{not json", "");
  read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("malformed JSON header"),
            std::string::npos);

  read = readSafetensors(tempPath("missing.safetensors"));
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find(
                "missing.safetensors': it does not exist, expected a "
                ".safetensors file"),
            std::string::npos)
      << read.status().message();

  // Not a file: its size is never taken from a stream position.
  read = readSafetensors("/dev/zero");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            "cannot read '/dev/zero': it is a character device, expected a "
            ".safetensors file");
}

/// Every malformed header entry is named with what is wrong in it.
TEST(SafetensorsTest, NamesEveryMalformedHeaderEntry) {
  struct Case {
    const char *header, *message;
  };
  const Case cases[] = {
      {R"({"a":{"dtype":"F32","shape":[1]}})", "tensor \"a\": malformed entry"},
      {R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
       "tensor \"a\": unsupported dtype I64 (expected F32, F16 or BF16)"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       "tensor \"a\": malformed shape"},
      {R"({"a":{"dtype":"F32","shape":[65536,65536,65536],"data_offsets":[0,4]}})",
       "tensor \"a\": too many elements"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":["0",4]}})",
       "tensor \"a\": malformed data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
       "tensor \"a\": data_offsets [4, 0) do not hold 1 F32 values within 8 "
       "data bytes"},
      // Two tensors in the same bytes (aliased, or overlapping).
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       "tensor \"b\": data_offsets [0, 4) overlap tensor \"a\"'s [0, 4): "
       "expected each tensor in bytes of its own"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
       "tensor \"b\": data_offsets [4, 8) overlap tensor \"a\"'s [0, 8): "
       "expected each tensor in bytes of its own"},
  };
  std::string path = tempPath("entries.safetensors");
  for (const Case &entry : cases) {
    SCOPED_TRACE(entry.header);
    writeRaw(path, entry.header, std::string(8, '\0'));
    StatusOr<SafetensorsFile> read = readSafetensors(path);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().message(), path + ": " + entry.message);
  }
  // A header length beyond the file, and a file too short for one.
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << std::string("\x40\x00\x00\x00\x00\x00\x00\x00{}", 10);
  StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            path + ": header length 64 exceeds the file (10 bytes)");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(),
            path + ": truncated: 3 bytes, expected at least an 8-byte header "
                   "length");
}

} // namespace
