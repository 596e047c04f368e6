// The safetensors reader on hand-built files: every offset and size below is worked out
// by hand, and every rejection must name the tensor or offset at fault.
#include "workers/checkpoint/safetensors.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/checkpoint/test_util.h"

namespace coil::checkpoint {
namespace {

using testing::Bytes;
using ::testing::HasSubstr;

std::string File(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t size = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(size >> (8 * i));
  return out + header + data;
}

std::string Error(const std::string& file) {
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParseSafetensors(Bytes(file), "t.safetensors");
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(SafetensorsTest, ReadsEntriesAtTheirOffsets) {
  // a: F32 [2] at data [0, 8); b: BF16 [1, 2] at [8, 12).
  std::string data;
  float a[2] = {1.5f, -2.0f};
  data.append(reinterpret_cast<const char*>(a), 8);
  data.append("\x80\x3f\x00\x40", 4);  // bf16 1.0, 2.0
  std::string file = File(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})",
      data);
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParseSafetensors(Bytes(file), "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  const StoredTensor& first = (*parsed)[0].name == "a" ? (*parsed)[0] : (*parsed)[1];
  const StoredTensor& second = (*parsed)[0].name == "a" ? (*parsed)[1] : (*parsed)[0];
  EXPECT_EQ(first.dtype, DType::kF32);
  EXPECT_EQ(first.shape, std::vector<int64_t>({2}));
  ASSERT_EQ(first.bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(first.bytes.data(), a, 8), 0);
  EXPECT_EQ(second.dtype, DType::kBF16);
  EXPECT_EQ(second.file_offset, file.size() - 4);  // the last 4 bytes of the file
}

TEST(SafetensorsTest, RoundTripsThroughTheWriter) {
  std::string payload = "abcdefgh";
  StoredTensor tensor;
  tensor.name = "w";
  tensor.dtype = DType::kF16;
  tensor.shape = {2, 2};
  tensor.bytes = Bytes(payload);
  std::string file = SerializeSafetensors({tensor});
  EXPECT_EQ((file.size() - payload.size()) % 8, 0u);  // header padded to 8 bytes
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParseSafetensors(Bytes(file), "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*parsed)[0].bytes.data()), 8), payload);
}

TEST(SafetensorsTest, RejectsTruncationAndCorruption) {
  std::string good =
      File(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_THAT(Error(good.substr(0, 5)), HasSubstr("truncated"));
  EXPECT_THAT(Error(good.substr(0, 20)), HasSubstr("header length"));
  EXPECT_THAT(Error(good.substr(0, good.size() - 1)), HasSubstr("tensor w"));  // data cut
  EXPECT_THAT(Error(File(R"({"w":{"dtype":"F32",)", "")), HasSubstr("not well-formed JSON"));
  EXPECT_THAT(Error(File(R"([1, 2])", "")), HasSubstr("not a JSON object"));
  EXPECT_THAT(Error(File(R"({"w":{"dtype":"F32","shape":[2]}})", "")), HasSubstr("tensor w"));
}

TEST(SafetensorsTest, RejectsOverlapsSizeMismatchDuplicatesAndDtypes) {
  std::string data(16, '\0');
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         data)),
              HasSubstr("overlap"));
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)),
              HasSubstr("tensor a"));  // 3 x 4 bytes != 8
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                         data)),
              HasSubstr("'a' appears twice"));
  EXPECT_THAT(Error(File(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data)),
              HasSubstr("tensor ids has dtype I64"));
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)),
              HasSubstr("tensor a"));
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)),
              HasSubstr("tensor a"));
  EXPECT_THAT(Error(File(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                         R"("data_offsets":[0,8]}})",
                         data)),
              HasSubstr("tensor a"));  // the product overflows 64 bits
}

}  // namespace
}  // namespace coil::checkpoint
