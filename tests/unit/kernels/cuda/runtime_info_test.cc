// The CUDA backend links against the cuBLASLt and NCCL it was compiled with, and a kernel
// launches and writes every element where a GPU is visible.
#include "kernels/cuda/runtime_info.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cuda/cuda_backend.h"

namespace coil::cuda {
namespace {

TEST(CudaRuntimeTest, LoadedLibrariesMatchTheHeaders) {
  const RuntimeInfo info = QueryRuntimeInfo();
  // NCCL_VERSION_CODE and CUBLAS_VER_MAJOR come from the headers coil compiled against;
  // the loaded libraries must be the same major version.
  EXPECT_EQ(info.nccl_version / 10000, NCCL_VERSION_CODE / 10000);
  EXPECT_EQ(info.cublaslt_version / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_GT(info.runtime_version, 0);
}

TEST(CudaRuntimeTest, FillWritesEveryElement) {
  const RuntimeInfo info = QueryRuntimeInfo();
  if (info.device_count == 0) GTEST_SKIP() << "no GPU: " << info.no_device_reason;
  constexpr size_t kCount = 1'000'003;  // not a multiple of the block size
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kCount * sizeof(float)), cudaSuccess);
  ASSERT_TRUE(FillDevice(device, kCount, 0.0f).ok());
  ASSERT_TRUE(FillDevice(device, kCount, 2.5f).ok());
  std::vector<float> host(kCount);
  ASSERT_EQ(cudaMemcpy(host.data(), device, kCount * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(device);
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(host[i], 2.5f) << "index " << i;
}

// Worked out by hand: mpirun's local ranks 0..3 on a node with 4 GPUs take GPU r; a rank
// whose launcher made exactly one GPU visible takes it whatever its local rank; more ranks
// than GPUs on a node is refused with the fix.
TEST(ChooseGpuTest, MapsLocalRanksToVisibleGpus) {
  EXPECT_EQ(ChooseGpu(0, 4).value(), 0);
  EXPECT_EQ(ChooseGpu(3, 4).value(), 3);
  EXPECT_EQ(ChooseGpu(1, 1).value(), 0);
  EXPECT_EQ(ChooseGpu(7, 1).value(), 0);
  const absl::StatusOr<int> too_many = ChooseGpu(2, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(too_many.status()));
  EXPECT_NE(too_many.status().message().find("2 GPU(s) visible"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(ChooseGpu(-1, 2).status()));
}

// A bad --cuda-matmul-rows is refused before any GPU is looked for, with the range to use.
TEST(CudaBackendTest, RefusesMatmulHeuristicRowsOutsideTheirRange) {
  for (const int64_t rows : {int64_t{0}, int64_t{-3}, kMaxCudaMatmulRows + 1}) {
    const auto backend = CudaBackend::Create(0, rows);
    ASSERT_TRUE(absl::IsInvalidArgument(backend.status())) << rows << ": " << backend.status();
    EXPECT_NE(backend.status().message().find("use 1..65536"), absl::string_view::npos);
  }
  // Refused for the CPU backend too: a bad flag is an error wherever it is given.
  const auto cpu = CreateBackend(BackendKind::kCpu, {.cuda_matmul_rows = 0});
  EXPECT_TRUE(absl::IsInvalidArgument(cpu.status())) << cpu.status();
  EXPECT_TRUE(CheckCudaMatmulRows(1).ok());
  EXPECT_TRUE(CheckCudaMatmulRows(kMaxCudaMatmulRows).ok());
}

}  // namespace
}  // namespace coil::cuda
