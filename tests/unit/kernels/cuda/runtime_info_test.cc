// The CUDA backend links against the cuBLASLt and NCCL it was compiled with, and a kernel
// launches and writes every element where a GPU is visible.
#include "kernels/cuda/runtime_info.h"

#include <cuda_runtime_api.h>
#include <cublas_api.h>
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace coil::cuda
