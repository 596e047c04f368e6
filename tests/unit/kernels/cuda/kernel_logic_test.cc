// Host checks of the CUDA kernels' logic that does not need a GPU: the argmax merge rule
// run through the kernel's own reduction shape (per-thread strided scans, warp butterflies,
// a fold over warps) against a left-to-right scan; the 16-bit rounding the matmul applies
// to x (the bf16 intrinsic against the CPU's FloatToBf16, the f16 high/remainder split's
// accuracy); the padded leading dimension of the 16-bit copy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cuda/argmax_pair.h"
#include "kernels/cuda/matmul.h"

namespace coil::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The CPU reference: the first maximum from the left; NaN never wins; (0, -inf) for a row
// with nothing above -inf.
ArgmaxPair ScanReference(const std::vector<float>& v) {
  float best = -kInf;
  int32_t index = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] > best) {
      best = v[i];
      index = static_cast<int32_t>(i);
    }
  }
  return {best, index < 0 ? 0 : index};
}

// argmax.cu's reduction, step for step: `threads` threads scan columns tid, tid + threads,
// ...; each warp merges by xor butterflies (lane i takes BetterOf(own, lane i ^ offset));
// thread 0 folds the warps' results in warp order.
ArgmaxPair KernelShape(const std::vector<float>& v, int threads) {
  std::vector<ArgmaxPair> lane(threads, ArgmaxPair{-kInf, -1});
  for (int t = 0; t < threads; ++t) {
    for (size_t i = t; i < v.size(); i += threads) ScanStep(lane[t], v[i], static_cast<int32_t>(i));
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    std::vector<ArgmaxPair> next(lane);
    for (int t = 0; t < threads; ++t) next[t] = BetterOf(lane[t], lane[t ^ offset]);
    lane = next;
  }
  // Every lane of a warp must hold the same pair (the kernel reads lane 0's only, but a
  // lane that disagreed would show the merge is not commutative).
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(lane[t].index, lane[t & ~31].index) << "thread " << t;
  }
  ArgmaxPair best = lane[0];
  for (int w = 1; w < threads / 32; ++w) best = BetterOf(best, lane[w * 32]);
  return {best.value, best.index < 0 ? 0 : best.index};
}

void ExpectSameAsScan(const std::vector<float>& v, const char* what) {
  const ArgmaxPair want = ScanReference(v);
  for (int threads : {32, 256, 1024}) {
    const ArgmaxPair got = KernelShape(v, threads);
    EXPECT_EQ(got.index, want.index) << what << ", " << threads << " threads";
    EXPECT_EQ(std::memcmp(&got.value, &want.value, sizeof(float)), 0)
        << what << ", " << threads << " threads: " << got.value << " vs " << want.value;
  }
}

TEST(ArgmaxMergeTest, KernelReductionMatchesALeftToRightScan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937_64 rng(7);
  for (size_t width : {1, 5, 37, 1000, 4099, 50288}) {
    std::uniform_real_distribution<float> value(-10.0f, 10.0f);
    std::uniform_int_distribution<size_t> col(0, width - 1);
    std::vector<float> v(width);
    for (float& f : v) f = value(rng);
    ExpectSameAsScan(v, "random");
    // Ties of the maximum far apart (different threads and warps): the lowest index wins.
    for (int i = 0; i < 4; ++i) v[col(rng)] = 11.0f;
    ExpectSameAsScan(v, "ties");
    // NaN at column 0 and elsewhere never wins.
    v[0] = nan;
    for (int i = 0; i < 10; ++i) v[col(rng)] = nan;
    ExpectSameAsScan(v, "nans");
    // Nothing above -inf: index 0, value -inf.
    for (size_t i = 0; i < width; ++i) v[i] = i % 3 == 0 ? nan : -kInf;
    ExpectSameAsScan(v, "nan and -inf only");
    // Only the last column is finite.
    v[width - 1] = -1e30f;
    ExpectSameAsScan(v, "last column");
  }
}

TEST(MatmulRoundingTest, Bf16IntrinsicRoundsLikeTheCpu) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  std::vector<float> samples = {
      0.0f,    -0.0f, 1.0f,  1.00390625f /* a tie: 1 + 2^-8 */, 1.01171875f /* 1 + 3 * 2^-8 */,
      3.0e38f, -kInf, 1e-40f};
  for (int i = 0; i < 100000; ++i) samples.push_back(value(rng));
  for (float x : samples) {
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    uint16_t bits;
    std::memcpy(&bits, &b, sizeof(bits));
    ASSERT_EQ(bits, FloatToBf16(x)) << x;
  }
}

TEST(MatmulRoundingTest, F16SplitKeepsAbout22Bits) {
  std::mt19937_64 rng(4);
  for (float scale : {1e-3f, 1.0f, 100.0f, 6e4f}) {
    std::uniform_real_distribution<float> value(-scale, scale);
    for (int i = 0; i < 20000; ++i) {
      const float x = value(rng);
      const __half hi = __float2half_rn(x);
      const __half lo = __float2half_rn(x - __half2float(hi));
      const double sum = static_cast<double>(__half2float(hi)) + __half2float(lo);
      // hi carries 11 bits and lo the next 11; below f16's normal range (2^-14) lo's
      // absolute resolution (2^-24) takes over.
      const double bound =
          std::max(std::fabs(static_cast<double>(x)) * std::ldexp(1.0, -21), std::ldexp(1.0, -24));
      ASSERT_LE(std::fabs(sum - x), bound) << x;
    }
  }
}

TEST(MatmulRoundingTest, HalfRowsLdIsPaddedTo256Bytes) {
  for (int64_t k : {1, 77, 127, 128, 129, 768, 1536, 50288}) {
    const int64_t ld = HalfRowsLd(k);
    EXPECT_GE(ld, k);
    EXPECT_LT(ld - k, 128);
    EXPECT_EQ(ld * 2 % 256, 0) << k;
  }
}

}  // namespace
}  // namespace coil::cuda
