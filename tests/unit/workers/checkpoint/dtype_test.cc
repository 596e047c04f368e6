// Element conversions. Expected values are worked out by hand from the IEEE formats, and
// the rounding is checked against a second implementation: the compiler's own _Float16
// conversion for f16, and "pick the nearer of the two neighbours, ties to even" in double
// arithmetic for bf16.
#include "workers/checkpoint/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace coil::checkpoint {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

TEST(DTypeTest, F16ToF32HandValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(F16ToF32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
}

TEST(DTypeTest, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);                          // below the halfway point
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);                          // halfway: even is 2^16 = inf
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie between 0x3c00, 0x3c01
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: 0x3c01, 0x3c02
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);             // tie between 0 and 1 unit
  EXPECT_EQ(F32ToF16(3 * std::ldexp(1.0f, -25)), 0x0002);         // tie between 1 and 2 units
  EXPECT_EQ(F32ToF16(-1e-10f), 0x8000);
  EXPECT_EQ(F32ToF16(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_NE(F32ToF16(std::nanf("")) & 0x03ff, 0);
}

TEST(DTypeTest, F32ToBF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, even stays
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, rounds up to even
  EXPECT_EQ(F32ToBF16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
}

TEST(DTypeTest, EveryHalfAndBFloatRoundTripsThroughF32) {
  // Widening is exact, so narrowing back must give the same bits (NaNs only stay NaN).
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    uint16_t b = static_cast<uint16_t>(bits);
    float half = F16ToF32(b);
    if (std::isnan(half)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(half))));
    } else {
      ASSERT_EQ(F32ToF16(half), b) << "f16 bits " << bits;
    }
    float brain = BF16ToF32(b);
    if (std::isnan(brain)) {
      EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(brain))));
    } else {
      ASSERT_EQ(F32ToBF16(brain), b) << "bf16 bits " << bits;
    }
  }
}

TEST(DTypeTest, BF16RoundingMatchesNearestNeighbourInDouble) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 997) {
    float value = FromBits(static_cast<uint32_t>(bits));
    if (!std::isfinite(value)) continue;
    uint32_t lower = static_cast<uint32_t>(bits) & 0xffff0000u;
    uint32_t upper = lower + 0x10000u;
    double below = std::fabs(static_cast<double>(value) - FromBits(lower));
    // Past the largest finite bf16 the upper neighbour is infinity, which IEEE rounding
    // treats as the finite value 2^128 when picking the nearer one.
    double upper_value = (upper & 0x7fffffffu) == 0x7f800000u
                             ? std::copysign(std::ldexp(1.0, 128), value)
                             : static_cast<double>(FromBits(upper));
    double above = std::fabs(upper_value - value);
    uint32_t nearest = below < above   ? lower
                       : above < below ? upper
                                       : ((lower >> 16) & 1 ? upper : lower);
    ASSERT_EQ(F32ToBF16(value), nearest >> 16) << "f32 bits " << bits;
  }
}

#if defined(__FLT16_MAX__)
TEST(DTypeTest, F16RoundingMatchesTheCompiler) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 1009) {
    float value = FromBits(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    _Float16 reference = static_cast<_Float16>(value);
    uint16_t expected;
    std::memcpy(&expected, &reference, 2);
    ASSERT_EQ(F32ToF16(value), expected) << "f32 bits " << bits << " value " << value;
  }
}
#endif

TEST(DTypeTest, ConvertElementsMatchesScalarConversions) {
  const float values[] = {0.5f, -3.25f, 1e-6f, 70000.0f};
  uint16_t halves[4];
  ConvertElements(values, DType::kF32, halves, DType::kF16, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(halves[i], F32ToF16(values[i]));
  uint16_t brains[4];
  ConvertElements(halves, DType::kF16, brains, DType::kBF16, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(brains[i], F32ToBF16(F16ToF32(halves[i])));
  float back[4];
  ConvertElements(brains, DType::kBF16, back, DType::kF32, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Bits(back[i]), Bits(BF16ToF32(brains[i])));
}

TEST(DTypeTest, ParseDTypeNamesTheBadValue) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  absl::StatusOr<DType> bad = ParseDType("f64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f64"), std::string::npos);
}

}  // namespace
}  // namespace coil::checkpoint
