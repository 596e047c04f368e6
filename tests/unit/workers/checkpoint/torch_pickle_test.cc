// The restricted unpickler and the torch.save-style writer, checked against fixtures that
// CPython's own pickle and zipfile modules wrote (testdata/make_fixtures.py: a second
// implementation), with the values listed there.
#include "workers/checkpoint/torch_pickle.h"

#include <string>

#include "absl/strings/str_cat.h"
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

// The state dict make_fixtures.py pickles.
std::vector<PickledTensor> FixtureTensors() {
  return {
      {"backbone.embedding.weight", "0", DType::kF16, 6, 0, {2, 3}, {3, 1}},
      {"backbone.norm_f.weight", "1", DType::kF32, 3, 0, {3}, {1}},
      {"packed", "2", DType::kBF16, 6, 2, {2, 2}, {2, 1}},
      {"conv", "3", DType::kF16, 6, 0, {3, 1, 2}, {2, 2, 1}},
      {"lm_head.weight", "0", DType::kF16, 6, 0, {2, 3}, {3, 1}},
  };
}

void ExpectSameTensors(const std::vector<PickledTensor>& got,
                       const std::vector<PickledTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].storage_key, want[i].storage_key) << want[i].name;
    EXPECT_EQ(got[i].dtype, want[i].dtype) << want[i].name;
    EXPECT_EQ(got[i].storage_numel, want[i].storage_numel) << want[i].name;
    EXPECT_EQ(got[i].storage_offset, want[i].storage_offset) << want[i].name;
    EXPECT_EQ(got[i].shape, want[i].shape) << want[i].name;
    EXPECT_EQ(got[i].stride, want[i].stride) << want[i].name;
  }
}

TEST(TorchPickleTest, ReadsWhatCPythonPickled) {
  std::string pickle = Fixture("torch_like.pkl");
  absl::StatusOr<std::vector<PickledTensor>> tensors = ParseTorchStateDict(Bytes(pickle));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectSameTensors(*tensors, FixtureTensors());
}

TEST(TorchPickleTest, WriterEmitsTheSameBytesAsCPython) {
  // Same opcodes, memo indices and batching as the pickle module under torch.save.
  EXPECT_EQ(WriteTorchStateDict(FixtureTensors()), Fixture("torch_like.pkl"));
}

TEST(TorchPickleTest, WriterRoundTripsLargeIntegersAndManyTensors) {
  std::vector<PickledTensor> tensors;
  for (int i = 0; i < 1500; ++i) {  // more than one SETITEMS batch of 1000
    tensors.push_back({absl::StrCat("t", i),
                       absl::StrCat(i),
                       DType::kBF16,
                       int64_t{5000000000} + i,
                       i * 70000,
                       {i + 1},
                       {1}});
  }
  std::string pickle = WriteTorchStateDict(tensors);
  absl::StatusOr<std::vector<PickledTensor>> back = ParseTorchStateDict(Bytes(pickle));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(*back, tensors);
}

TEST(TorchPickleTest, EveryTruncationIsAnErrorNotACrash) {
  std::string pickle = Fixture("torch_like.pkl");
  for (size_t length = 0; length < pickle.size(); ++length) {
    absl::StatusOr<std::vector<PickledTensor>> parsed =
        ParseTorchStateDict(Bytes(pickle.substr(0, length)));
    ASSERT_FALSE(parsed.ok()) << "prefix of " << length << " bytes parsed";
  }
}

// A pickle from a literal that may hold NUL bytes.
template <size_t N>
std::string Raw(const char (&text)[N]) {
  return std::string(text, N - 1);
}

std::string Refusal(const std::string& pickle) {
  absl::StatusOr<std::vector<PickledTensor>> parsed = ParseTorchStateDict(Bytes(pickle));
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(TorchPickleTest, ForbiddenOpcodesAndGlobalsAreRefusedByName) {
  // GLOBAL os.system, the classic payload.
  EXPECT_THAT(Refusal(std::string("\x80\x02"
                                  "cos\nsystem\n",
                                  13)),
              HasSubstr("os.system"));
  // The same through STACK_GLOBAL (protocol 4).
  EXPECT_THAT(Refusal(std::string("\x80\x04\x8c\x02os\x8c\x06system\x93", 16)),
              HasSubstr("os.system"));
  // INST and OBJ build arbitrary objects.
  EXPECT_THAT(Refusal("\x80\x02(ibuiltins\nexec\n"), HasSubstr("INST"));
  EXPECT_THAT(Refusal("\x80\x02(o."), HasSubstr("OBJ"));
  EXPECT_THAT(Refusal(std::string("\x80\x02\x81", 3)), HasSubstr("NEWOBJ"));
  EXPECT_THAT(Refusal(std::string("\x80\x02\x82\x01", 4)), HasSubstr("EXT1"));
  EXPECT_THAT(Refusal("\x80\x02S'x'\n."), HasSubstr("STRING"));
  // An allowed global with arguments it never gets from torch.save.
  EXPECT_THAT(Refusal("\x80\x02"
                      "ccollections\nOrderedDict\nK\x01\x85R."),
              HasSubstr("OrderedDict called with arguments"));
  // A storage type coil does not read.
  EXPECT_THAT(Refusal("\x80\x02"
                      "ctorch\nLongStorage\n"),
              HasSubstr("torch.LongStorage"));
  // A dict whose value is not a tensor.
  EXPECT_THAT(Refusal(Raw("\x80\x02}X\x01\x00\x00\x00"
                          "aK\x01s.")),
              HasSubstr("entry a is a int"));
  EXPECT_THAT(Refusal("\x80\x02K\x01."), HasSubstr("not a state dict"));
  EXPECT_THAT(Refusal("\x80\x02h\x05"), HasSubstr("memo key 5"));
  EXPECT_THAT(Refusal("\x80\x02t"), HasSubstr("MARK"));
  EXPECT_THAT(Refusal("\x80\x09"), HasSubstr("protocol 9"));
}

TEST(TorchPickleTest, ZipWithForbiddenPickleIsRefusedNamingTheGlobal) {
  std::string file = Fixture("evil_reduce.bin");
  absl::StatusOr<std::vector<StoredTensor>> parsed = ParsePytorchZip(Bytes(file), "evil.bin");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("posix.system"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("archive/data.pkl"));
}

}  // namespace
}  // namespace coil::checkpoint
