// NcclCommunicator under mpirun, one GPU per rank: sums against values worked out here,
// bit-identical on every rank, all-gather, broadcast and barrier on device memory. Where
// fewer GPUs are visible than ranks, the collectives are skipped and only the failure
// status of creation is checked.
#include "workers/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/workers/comm/mpi_test_util.h"
#include "workers/comm/mpi_communicator.h"

namespace coil::comm {
namespace {

int VisibleGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// The same answer on every rank (all ranks of these tests share one machine).
bool EnoughGpus() { return VisibleGpus() >= WorldSize(); }

// A device buffer freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&data, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* floats() { return static_cast<float*>(data); }
  void* data = nullptr;
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeNccl() {
  CommunicatorOptions options;
  options.kind = CommunicatorKind::kNccl;
  return CreateCommunicator(options);
}

TEST(NcclCommunicatorTest, WithoutAGpuPerRankCreationFailsWithAStatus) {
  if (EnoughGpus()) GTEST_SKIP() << "every rank has a GPU; the failure path is not reachable";
  // No GPU (or too few): every rank gets an error, none hangs in ncclCommInitRank.
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeNccl();
  EXPECT_FALSE(comm.ok());
  EXPECT_TRUE(comm.status().code() == absl::StatusCode::kUnavailable ||
              comm.status().code() == absl::StatusCode::kFailedPrecondition)
      << comm.status();
}

TEST(NcclCommunicatorTest, AllReduceIsTheRankOrderSumOnEveryRank) {
  if (!EnoughGpus()) {
    GTEST_SKIP() << "no GPU for each of " << WorldSize() << " ranks (" << VisibleGpus()
                 << " visible): the NCCL communicator runs where GPUs are lent";
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeNccl();
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->memory_space(), MemorySpace::kDevice);
  const int rank = WorldRank();
  const int ranks = WorldSize();
  constexpr size_t kCount = 100003;
  // Rank r holds (r + 1) × (i % 1000 + 1) + 0.25 × r: sums exact in fp32, worked out by hand.
  std::vector<float> host(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = (rank + 1) * (i % 1000 + 1) + 0.25f * rank;
  DeviceBuffer device(kCount * sizeof(float));
  ASSERT_EQ(cudaMemcpy(device.data, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_TRUE((*comm)->AllReduceSum(device.floats(), kCount).ok());
  EXPECT_TRUE((*comm)->Barrier().ok());
  ASSERT_EQ(cudaMemcpy(host.data(), device.data, kCount * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  const float triangle = ranks * (ranks + 1) / 2.0f;
  const float quarters = 0.25f * ranks * (ranks - 1) / 2.0f;
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(host[i], (i % 1000 + 1) * triangle + quarters) << "element " << i;
  }
  EXPECT_TRUE(SameBytesOnEveryRank(host.data(), static_cast<int>(kCount * sizeof(float))));
}

TEST(NcclCommunicatorTest, AllGatherAndBroadcastMoveDeviceBytes) {
  if (!EnoughGpus()) {
    GTEST_SKIP() << "no GPU for each of " << WorldSize() << " ranks (" << VisibleGpus()
                 << " visible): the NCCL communicator runs where GPUs are lent";
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeNccl();
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int rank = WorldRank();
  const int ranks = WorldSize();
  constexpr size_t kCount = 7;
  std::vector<float> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = static_cast<float>(rank * 100 + i);
  DeviceBuffer send(kCount * sizeof(float));
  DeviceBuffer recv(ranks * kCount * sizeof(float));
  cudaMemcpy(send.data, mine.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
  EXPECT_TRUE((*comm)->AllGather(send.floats(), kCount, recv.floats()).ok());

  constexpr size_t kBytes = (size_t{16} << 20) + 5;
  std::vector<unsigned char> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 1);
  DeviceBuffer payload(kBytes);
  cudaMemset(payload.data, 0, kBytes);
  if (rank == ranks - 1) cudaMemcpy(payload.data, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  EXPECT_TRUE((*comm)->Broadcast(payload.data, kBytes, ranks - 1).ok());
  EXPECT_TRUE((*comm)->Barrier().ok());

  std::vector<float> gathered(ranks * kCount);
  cudaMemcpy(gathered.data(), recv.data, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(gathered[r * kCount + i], r * 100.0f + i);
  }
  std::vector<unsigned char> received(kBytes);
  cudaMemcpy(received.data(), payload.data, kBytes, cudaMemcpyDeviceToHost);
  EXPECT_TRUE(received == pattern);
}

}  // namespace
}  // namespace coil::comm
