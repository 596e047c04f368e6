// Slices of a tensor. Values are checked against the whole tensor indexed by hand; the
// "no whole copy" property is checked by revoking access (PROT_NONE) to every page of the
// mapping outside the requested rows: a reader that touched any other byte would crash the
// test, as the death test below shows it does.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workers/checkpoint/test_util.h"
#include "workers/checkpoint/checkpoint.h"
#include "workers/checkpoint/safetensors.h"

namespace coil::checkpoint {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;

constexpr int64_t kRows = 64;
constexpr int64_t kCols = 1024;  // one 4 KiB page per f32 row

// Value of element (r, c): distinct and exact in f32 and bf16 (small integers).
float Element(int64_t r, int64_t c) { return static_cast<float>(r * 2 + (c % 7)); }

class SliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<float> values(kRows * kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) values[r * kCols + c] = Element(r, c);
    }
    std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    StoredTensor big;
    big.name = "big";
    big.shape = {kRows, kCols};
    big.bytes = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    testing::WriteFileBytes(scratch_.Sub("model.safetensors"), SerializeSafetensors({big}));
    absl::StatusOr<std::unique_ptr<Checkpoint>> opened =
        OpenCheckpointFiles(scratch_.path());
    ASSERT_TRUE(opened.ok()) << opened.status();
    checkpoint_ = std::move(*opened);
  }

  // Revokes access to every page of the mapping that holds no byte of `segments`
  // (from the page holding the file's first byte to the tensor's last page).
  void ProtectAllBut(const std::vector<RowSegment>& segments) {
    absl::Span<const uint8_t> bytes = *checkpoint_->StoredBytes("big");
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    uintptr_t start = reinterpret_cast<uintptr_t>(bytes.data());
    uintptr_t end = start + bytes.size();
    uintptr_t cursor = start / page * page;  // the mapping starts on a page: the header's
    auto protect = [&](uintptr_t from, uintptr_t to) {
      from = (from + page - 1) / page * page;  // only pages entirely outside the slices
      to = to / page * page;
      if (to > from) {
        ASSERT_EQ(::mprotect(reinterpret_cast<void*>(from), to - from, PROT_NONE), 0);
        protected_.emplace_back(from, to - from);
      }
    };
    std::vector<RowSegment> sorted = segments;
    std::sort(sorted.begin(), sorted.end(),
              [](const RowSegment& a, const RowSegment& b) { return a.begin < b.begin; });
    for (const RowSegment& segment : sorted) {
      protect(cursor, start + segment.begin * kCols * 4);
      cursor = start + (segment.begin + segment.count) * kCols * 4;
    }
    protect(cursor, (end + page - 1) / page * page);
  }

  void TearDown() override {
    for (auto [address, length] : protected_) {
      ::mprotect(reinterpret_cast<void*>(address), length, PROT_READ);
    }
  }

  ScratchDir scratch_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<std::pair<uintptr_t, size_t>> protected_;
};

absl::Span<uint8_t> AsBytes(std::vector<float>& values) {
  return absl::MakeSpan(reinterpret_cast<uint8_t*>(values.data()), values.size() * 4);
}

TEST_F(SliceTest, RowsColumnsAndSegmentsHoldTheRightValues) {
  std::vector<float> rows(5 * kCols);
  ASSERT_TRUE(checkpoint_->ReadRows("big", 10, 5, DType::kF32, AsBytes(rows)).ok());
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < kCols; ++c) ASSERT_EQ(rows[r * kCols + c], Element(10 + r, c));
  }
  std::vector<float> columns(kRows * 3);
  ASSERT_TRUE(checkpoint_->ReadColumns("big", 100, 3, DType::kF32, AsBytes(columns)).ok());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(columns[r * 3 + c], Element(r, 100 + c));
  }
  std::vector<RowSegment> segments = {{40, 2}, {3, 1}, {63, 1}};
  std::vector<uint16_t> bf16(4 * kCols);
  ASSERT_TRUE(
      checkpoint_
          ->ReadSegments("big", segments, DType::kBF16,
                         absl::MakeSpan(reinterpret_cast<uint8_t*>(bf16.data()), bf16.size() * 2))
          .ok());
  const int64_t order[] = {40, 41, 3, 63};  // segments in the order asked
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t c = 0; c < kCols; ++c) {
      ASSERT_EQ(BF16ToF32(bf16[i * kCols + c]), Element(order[i], c));
    }
  }
}

TEST_F(SliceTest, BadRangesAndBuffersAreRefused) {
  std::vector<float> out(kCols);
  absl::Status status = checkpoint_->ReadRows("big", 64, 1, DType::kF32, AsBytes(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor big"));
  status = checkpoint_->ReadColumns("big", 1020, 5, DType::kF32, AsBytes(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  status = checkpoint_->ReadRows("big", 0, 2, DType::kF32, AsBytes(out));  // buffer too small
  EXPECT_THAT(std::string(status.message()), HasSubstr("8192-byte buffer"));
  EXPECT_EQ(checkpoint_->ReadRows("nope", 0, 1, DType::kF32, AsBytes(out)).code(),
            absl::StatusCode::kNotFound);
  RowSegment negative{-1, 1};
  EXPECT_FALSE(checkpoint_->ReadSegments("big", {&negative, 1}, DType::kF32, AsBytes(out)).ok());
}

TEST_F(SliceTest, SegmentsTouchOnlyTheirOwnPages) {
  std::vector<RowSegment> segments = {{3, 2}, {40, 3}};
  ProtectAllBut(segments);
  ASSERT_FALSE(protected_.empty());
  std::vector<float> out(5 * kCols);
  ASSERT_TRUE(checkpoint_->ReadSegments("big", segments, DType::kF32, AsBytes(out)).ok());
  EXPECT_EQ(out[0], Element(3, 0));
  EXPECT_EQ(out[4 * kCols + 5], Element(42, 5));
  std::vector<float> one_row(kCols);
  ASSERT_TRUE(checkpoint_->ReadRows("big", 41, 1, DType::kF32, AsBytes(one_row)).ok());
  EXPECT_EQ(one_row[9], Element(41, 9));
}

TEST_F(SliceTest, ProtectionCatchesAReadOfTheWholeTensor) {
  // The control for the test above: reading outside the slices does fault.
  ProtectAllBut({{3, 2}});
  std::vector<float> out(kRows * kCols);
  EXPECT_DEATH((void)checkpoint_->ReadTensor("big", DType::kF32, AsBytes(out)), "");
}

}  // namespace
}  // namespace coil::checkpoint
