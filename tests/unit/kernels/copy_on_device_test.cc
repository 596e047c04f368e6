// Backend::CopyOnDevice and StatePool::CopyRow on every backend (the CUDA backend skips
// without a GPU). Expected bytes come from the same copy done on host memory by a plain
// loop in the test; every byte outside the destination blocks must be unchanged.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/state_pool.h"

namespace coil {
namespace {

struct BackendCase {
  std::string name;
  BackendKind kind;
  int threads;
};

class CopyOnDeviceTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(GetParam().kind, {.threads = GetParam().threads});
    if (absl::IsUnimplemented(backend.status()) || absl::IsUnavailable(backend.status())) {
      GTEST_SKIP() << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(backend).value();
  }

  // A device buffer of `bytes` holding byte i = (i * 7 + 3) % 251, and its host copy.
  void MakeBuffer(size_t bytes) {
    auto buffer = backend_->Allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffer_ = std::move(buffer).value();
    host_.resize(bytes);
    for (size_t i = 0; i < bytes; ++i) host_[i] = static_cast<uint8_t>((i * 7 + 3) % 251);
    ASSERT_TRUE(backend_->CopyFromHost(buffer_.data(), host_.data(), bytes).ok());
  }

  std::vector<uint8_t> Read() {
    std::vector<uint8_t> out(buffer_.bytes());
    EXPECT_TRUE(backend_->CopyToHost(out.data(), buffer_.data(), out.size()).ok());
    return out;
  }

  char* At(size_t offset) { return static_cast<char*>(buffer_.data()) + offset; }

  std::unique_ptr<Backend> backend_;
  Buffer buffer_;
  std::vector<uint8_t> host_;
};

TEST_P(CopyOnDeviceTest, CopiesStridedBlocksAndNothingElse) {
  MakeBuffer(4096);
  // Five blocks of 24 bytes, 200 apart from offset 16, to blocks 300 apart from offset
  // 2000: the same copy on the host copy gives the expected bytes.
  ASSERT_TRUE(backend_->CopyOnDevice(At(2000), 300, At(16), 200, 24, 5).ok());
  for (size_t i = 0; i < 5; ++i) {
    std::memcpy(&host_[2000 + i * 300], &host_[16 + i * 200], 24);
  }
  EXPECT_EQ(Read(), host_);
}

TEST_P(CopyOnDeviceTest, InterleavedRowsOfOneBufferAsTheStatePoolHasThem) {
  // Three "layers" of four 32-byte rows: row 1 of each layer over row 3 of each layer.
  MakeBuffer(3 * 4 * 32);
  ASSERT_TRUE(backend_->CopyOnDevice(At(3 * 32), 4 * 32, At(1 * 32), 4 * 32, 32, 3).ok());
  for (size_t layer = 0; layer < 3; ++layer) {
    std::memcpy(&host_[(layer * 4 + 3) * 32], &host_[(layer * 4 + 1) * 32], 32);
  }
  EXPECT_EQ(Read(), host_);
}

TEST_P(CopyOnDeviceTest, OneBlockIgnoresTheStrides) {
  MakeBuffer(256);
  ASSERT_TRUE(backend_->CopyOnDevice(At(128), 0, At(0), 0, 100, 1).ok());
  std::memcpy(&host_[128], &host_[0], 100);
  EXPECT_EQ(Read(), host_);
}

TEST_P(CopyOnDeviceTest, RefusesOverlapShortStridesAndNullAndSkipsEmptyCopies) {
  MakeBuffer(1024);
  // Destination block 0, [40, 72), meets source block 0, [16, 48).
  const absl::Status overlap = backend_->CopyOnDevice(At(40), 216, At(16), 216, 32, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(overlap)) << overlap;
  EXPECT_NE(overlap.message().find("overlaps source block 0"), std::string::npos) << overlap;
  // Destination blocks 2 and 3 are source blocks 0 and 1.
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->CopyOnDevice(At(600), 64, At(728), 64, 16, 4)));
  // Touching blocks (one ends where the other starts) do not overlap.
  EXPECT_TRUE(backend_->CopyOnDevice(At(64), 128, At(0), 128, 64, 2).ok());
  std::memcpy(&host_[64], &host_[0], 64);
  std::memcpy(&host_[192], &host_[128], 64);
  const absl::Status short_stride = backend_->CopyOnDevice(At(512), 16, At(0), 64, 32, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(short_stride)) << short_stride;
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->CopyOnDevice(nullptr, 0, At(0), 0, 8, 1)));
  EXPECT_TRUE(backend_->CopyOnDevice(At(0), 8, At(512), 8, 8, 0).ok());
  EXPECT_TRUE(backend_->CopyOnDevice(nullptr, 8, nullptr, 8, 0, 4).ok());
  EXPECT_EQ(Read(), host_);
}

TEST_P(CopyOnDeviceTest, StatePoolCopiesOneRowOfEveryLayer) {
  const StatePoolShape shape{.layers = 3,
                             .state_rows = 4,
                             .d_conv = 3,
                             .conv_channels = 5,
                             .heads = 2,
                             .headdim = 3,
                             .d_state = 4};
  auto pool = StatePool::Create(*backend_, shape);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // Every float of both states distinct: layer l's state as a [rows + 1, per_row] block.
  const int64_t rows = shape.state_rows + 1;
  std::vector<std::vector<float>> conv(3), ssm(3);
  for (int64_t l = 0; l < shape.layers; ++l) {
    conv[l].resize(rows * shape.conv_floats_per_row());
    ssm[l].resize(rows * shape.ssm_floats_per_row());
    for (size_t i = 0; i < conv[l].size(); ++i) conv[l][i] = 1000.0f * l + i;
    for (size_t i = 0; i < ssm[l].size(); ++i) ssm[l][i] = -1000.0f * l - i;
    ASSERT_TRUE(
        backend_->CopyFromHost(pool->ConvState(l).raw(), conv[l].data(), conv[l].size() * 4).ok());
    ASSERT_TRUE(
        backend_->CopyFromHost(pool->SsmState(l).raw(), ssm[l].data(), ssm[l].size() * 4).ok());
  }
  ASSERT_TRUE(pool->CopyRow(*backend_, 1, 3).ok());
  for (int64_t l = 0; l < shape.layers; ++l) {
    for (auto [state, per_row, tensor] :
         {std::tuple{&conv[l], shape.conv_floats_per_row(), pool->ConvState(l)},
          std::tuple{&ssm[l], shape.ssm_floats_per_row(), pool->SsmState(l)}}) {
      std::copy(state->begin() + 1 * per_row, state->begin() + 2 * per_row,
                state->begin() + 3 * per_row);
      std::vector<float> got(state->size());
      ASSERT_TRUE(backend_->CopyToHost(got.data(), tensor.raw(), got.size() * 4).ok());
      EXPECT_EQ(got, *state) << "layer " << l;
    }
  }
  // The scratch row (4), a row past it, a negative row and a row onto itself are refused.
  for (auto [from, to] : {std::pair{0, 4}, {4, 0}, {0, 9}, {-1, 2}, {2, 2}}) {
    const absl::Status refused = pool->CopyRow(*backend_, from, to);
    EXPECT_TRUE(absl::IsInvalidArgument(refused)) << from << " -> " << to << ": " << refused;
  }
}

TEST_P(CopyOnDeviceTest, StatePoolCopiesOneRowOfABf16SsmState) {
  // The SSM state in bf16: a row is half the bytes, and every layer's copy lands there.
  const StatePoolShape shape{.layers = 3,
                             .state_rows = 4,
                             .d_conv = 3,
                             .conv_channels = 5,
                             .heads = 2,
                             .headdim = 3,
                             .d_state = 4,
                             .ssm_dtype = DType::kBF16};
  auto pool = StatePool::Create(*backend_, shape);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const int64_t rows = shape.state_rows + 1;
  std::vector<std::vector<uint16_t>> ssm(3);
  for (int64_t l = 0; l < shape.layers; ++l) {
    ssm[l].resize(rows * shape.ssm_floats_per_row());
    for (size_t i = 0; i < ssm[l].size(); ++i) ssm[l][i] = static_cast<uint16_t>(1000 * l + i);
    ASSERT_TRUE(
        backend_->CopyFromHost(pool->SsmState(l).raw(), ssm[l].data(), ssm[l].size() * 2).ok());
  }
  ASSERT_TRUE(pool->CopyRow(*backend_, 2, 0).ok());
  const int64_t per_row = shape.ssm_floats_per_row();
  for (int64_t l = 0; l < shape.layers; ++l) {
    std::copy(ssm[l].begin() + 2 * per_row, ssm[l].begin() + 3 * per_row, ssm[l].begin());
    std::vector<uint16_t> got(ssm[l].size());
    ASSERT_TRUE(backend_->CopyToHost(got.data(), pool->SsmState(l).raw(), got.size() * 2).ok());
    EXPECT_EQ(got, ssm[l]) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CopyOnDeviceTest,
                         ::testing::Values(BackendCase{"cpu", BackendKind::kCpu, 2},
                                           BackendCase{"cpu1t", BackendKind::kCpu, 1},
                                           BackendCase{"cuda", BackendKind::kCuda, 1}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace coil
