// The Philox draws shared by the host sampler and the GPU kernels: the libm-free log they
// use stays within 2 units in the last place of std::log, and the Gumbel draws keep their
// range and law.
#include "kernels/philox.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace coil::philox {
namespace {

double UlpDistance(double a, double b) {
  return std::abs(a - b) / (std::nextafter(std::abs(b), INFINITY) - std::abs(b));
}

TEST(PhiloxTest, PortableLogIsWithinTwoUlpsOfStdLog) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    double x = unit(rng);
    if (i % 3 == 1) x = 1.0 - x * 1e-9;            // near 1, where log is near 0
    if (i % 3 == 2) x = std::ldexp(x + 0.5, -60 + i % 70);  // across exponents
    if (!(x > 0.0) || x == 1.0) continue;
    worst = std::max(worst, UlpDistance(PortableLog(x), std::log(x)));
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(PortableLog(1.0), 0.0);
  EXPECT_EQ(PortableLog(2.0), std::log(2.0));
  // The extremes of UniformOpen01 and of -log(u).
  EXPECT_LE(UlpDistance(PortableLog(0x1.0p-54), std::log(0x1.0p-54)), 2.0);
  EXPECT_LE(UlpDistance(PortableLog(0x1.0p-55), std::log(0x1.0p-55)), 2.0);
}

// Gumbel(0, 1) has mean Euler's gamma and variance pi^2 / 6; the draws stay below 37.5
// (the bound the sampler prunes with) and are fully determined by (seed, step, index).
TEST(PhiloxTest, GumbelDrawsHaveTheGumbelLaw) {
  constexpr int kDraws = 400000;
  double sum = 0.0, sum_sq = 0.0, largest = -INFINITY;
  for (int i = 0; i < kDraws; ++i) {
    const double g = Gumbel(0x0123456789abcdefull, static_cast<uint32_t>(i / 1000),
                            static_cast<uint32_t>(i % 1000));
    sum += g;
    sum_sq += g * g;
    largest = std::max(largest, g);
  }
  const double mean = sum / kDraws, variance = sum_sq / kDraws - mean * mean;
  // Standard errors: sqrt(1.645 / 4e5) = 0.002 for the mean, about 0.01 for the variance.
  EXPECT_NEAR(mean, 0.5772156649, 0.01);
  EXPECT_NEAR(variance, 1.6449340668, 0.05);
  EXPECT_LT(largest, 37.5);
  EXPECT_EQ(Gumbel(7, 8, 9), Gumbel(7, 8, 9));
  EXPECT_NE(Gumbel(7, 8, 9), Gumbel(7, 8, 10));
  EXPECT_NE(Gumbel(7, 8, 9), Gumbel(7, 9, 9));
  EXPECT_NE(Gumbel(7, 8, 9), Gumbel(uint64_t{7} | (uint64_t{1} << 32), 8, 9));
}

}  // namespace
}  // namespace coil::philox
