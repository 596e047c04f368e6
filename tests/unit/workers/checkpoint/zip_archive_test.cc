// The zip reader and writer. Archives come from CPython's zipfile (testdata, an
// independent writer) and from coil's writer; offsets are checked against the 64-byte
// alignment torch.save uses.
#include "workers/checkpoint/zip_archive.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/checkpoint/test_util.h"
#include "workers/checkpoint/pytorch_zip.h"

namespace coil::checkpoint {
namespace {

using testing::Bytes;
using testing::Fixture;
using ::testing::HasSubstr;
using testing::Text;

TEST(ZipArchiveTest, Crc32OfAKnownString) {
  // The standard check value of CRC-32 (ISO-HDLC) for "123456789".
  EXPECT_EQ(Crc32(Bytes("123456789")), 0xCBF43926u);
}

TEST(ZipArchiveTest, ReadsCPythonZipfileArchive) {
  std::string file = Fixture("torch_like.bin");
  absl::StatusOr<std::vector<ZipEntry>> entries = ReadZipArchive(Bytes(file), "f");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 7u);  // data.pkl, byteorder, 4 storages, version
  EXPECT_EQ((*entries)[0].name, "archive/data.pkl");
  EXPECT_EQ(Text((*entries)[0].data), Fixture("torch_like.pkl"));
  EXPECT_EQ((*entries)[1].name, "archive/byteorder");
  EXPECT_EQ(Text((*entries)[1].data), "little");
  for (const ZipEntry& entry : *entries) EXPECT_EQ(Crc32(entry.data), entry.crc32) << entry.name;
}

TEST(ZipArchiveTest, WriterRoundTripsWithAlignedData) {
  const std::string kilo(1000, 'x');
  std::vector<ZipInput> inputs = {
      {"a/data.pkl", "pickle"}, {"a/data/0", kilo}, {"a/data/1", ""}, {"a/version", "3\n"}};
  std::string file = WriteZipArchive(inputs);
  absl::StatusOr<std::vector<ZipEntry>> entries = ReadZipArchive(Bytes(file), "f");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ((*entries)[i].name, inputs[i].name);
    EXPECT_EQ(Text((*entries)[i].data), std::string(inputs[i].data));
    EXPECT_EQ((*entries)[i].data_offset % 64, 0u) << inputs[i].name;
    EXPECT_EQ((*entries)[i].crc32, Crc32(Bytes(std::string(inputs[i].data))));
  }
}

TEST(ZipArchiveTest, Zip64RecordsAreFollowed) {
  // Saturated 32-bit fields everywhere: every size and offset must come from the zip64
  // extra fields and the zip64 end record.
  const std::string payload(300, 'y');
  std::vector<ZipInput> inputs = {{"a/data.pkl", "pickle"}, {"a/data/0", payload}};
  std::string file = WriteZipArchive(inputs, 64, /*force_zip64=*/true);
  absl::StatusOr<std::vector<ZipEntry>> entries = ReadZipArchive(Bytes(file), "f");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ(Text((*entries)[1].data), inputs[1].data);
  EXPECT_EQ((*entries)[1].data_offset % 64, 0u);
  // Without the zip64 locator the saturated fields cannot be resolved.
  std::string broken = file;
  size_t locator = broken.rfind(std::string("PK\x06\x07", 4));
  ASSERT_NE(locator, std::string::npos);
  broken[locator] = 'X';
  EXPECT_THAT(std::string(ReadZipArchive(Bytes(broken), "f").status().message()),
              HasSubstr("zip64"));
}

TEST(ZipArchiveTest, CompressedEntriesAreRefusedByName) {
  std::string file = Fixture("deflated.bin");
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParsePytorchZip(Bytes(file), "d.bin");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("archive/data.pkl"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("compressed (method 8)"));
}

TEST(ZipArchiveTest, TruncatedOrCorruptArchivesAreErrors) {
  std::string file = Fixture("torch_like.bin");
  // Every prefix loses the end record or points past the end: never a crash.
  for (size_t length = 0; length < file.size(); length += 7) {
    EXPECT_FALSE(ReadZipArchive(Bytes(file.substr(0, length)), "f").ok()) << length;
  }
  absl::StatusOr<std::vector<ZipEntry>> entries = ReadZipArchive(Bytes(file), "f");
  ASSERT_TRUE(entries.ok());
  // Flip a byte inside data.pkl: the CRC check names the entry.
  std::string corrupt = file;
  corrupt[(*entries)[0].data_offset + 10] ^= 0x40;
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParsePytorchZip(Bytes(corrupt), "c.bin");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("archive/data.pkl fails its CRC"));
  // A storage entry shorter than the storage it declares.
  const std::string pickle = Text((*entries)[0].data);
  const std::string four(4, '\0');
  const std::string twelve(12, '\0');
  std::vector<ZipInput> inputs = {{"a/data.pkl", pickle},
                                  {"a/data/0", four},
                                  {"a/data/1", twelve},
                                  {"a/data/2", twelve},
                                  {"a/data/3", twelve}};
  std::string short_storage = WriteZipArchive(inputs);
  parsed = ParsePytorchZip(Bytes(short_storage), "s.bin");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("backbone.embedding.weight"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("storage 0"));
  // A missing storage entry.
  inputs[1].data = twelve;
  inputs.erase(inputs.begin() + 2);
  parsed = ParsePytorchZip(Bytes(WriteZipArchive(inputs)), "m.bin");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("storage 1 has no entry"));
  // Not a zip at all.
  EXPECT_THAT(std::string(ReadZipArchive(Bytes(std::string(100, 'z')), "f").status().message()),
              HasSubstr("end-of-central-directory"));
}

}  // namespace
}  // namespace coil::checkpoint
