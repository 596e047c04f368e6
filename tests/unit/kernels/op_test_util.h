// Helpers shared by the kernel tests and benchmarks: device arrays with guard regions,
// seeded random inputs and the error measures of docs/ARCHITECTURE.md §8.
#ifndef COIL_TESTS_UNIT_KERNELS_OP_TEST_UTIL_H_
#define COIL_TESTS_UNIT_KERNELS_OP_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/vec_math.h"

namespace coil::testing {

// A stable 64-bit FNV-1a hash: seeds derived from case names are the same on every run
// and every machine, so a failing case can be re-run alone.
inline uint64_t SeedFromName(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline std::vector<float> RandomFloats(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// float -> stored bytes of `dtype` (bf16/f16 rounded to nearest even) and back.
inline std::vector<uint8_t> Encode(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> bytes(v.size() * DTypeSize(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = FloatToBf16(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      // f16 by round-to-nearest via float arithmetic on the 11-bit mantissa; inputs are
      // in [-8, 8], far from f16's range limits.
      const float f = v[i];
      uint16_t h = 0;
      if (f != 0.0f) {
        int e;
        const float m = std::frexp(std::fabs(f), &e);  // f = m 2^e, m in [0.5, 1)
        float q = std::nearbyint(m * 2048.0f);          // 11 significant bits
        if (q == 2048.0f) {
          q = 1024.0f;
          ++e;
        }
        const int exp_field = e - 1 + 15;
        if (exp_field <= 0) {
          // Subnormal: a multiple of 2^-24 (rounds up into the smallest normal at 1024).
          h = static_cast<uint16_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
        } else {
          h = static_cast<uint16_t>((exp_field << 10) | (static_cast<int>(q) - 1024));
        }
        if (f < 0) h |= 0x8000;
      }
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

inline std::vector<float> Decode(const std::vector<uint8_t>& bytes, DType dtype) {
  const size_t n = bytes.size() / DTypeSize(dtype);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    if (dtype == DType::kF32) {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
      continue;
    }
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    v[i] = dtype == DType::kBF16 ? Bf16ToFloat(h) : F16ToFloat(h);
  }
  return v;
}

// NMSE = mse(a, b) / mse(b, 0), as test-backend-ops computes it.
inline double Nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    err += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  return ref == 0.0 ? err : err / ref;
}

// max |a - b| / max |b| (docs/ARCHITECTURE.md §8's relative error of a row).
inline double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  return ref == 0.0 ? err : err / ref;
}

// An array in a backend's memory followed by a guard region of a fixed bit pattern; an
// op that writes past its tensor changes the guard.
class DeviceArray {
 public:
  static constexpr size_t kGuardBytes = 1024;
  static constexpr uint8_t kGuardByte = 0xA5;

  static absl::StatusOr<DeviceArray> Create(Backend& backend, const std::vector<uint8_t>& bytes) {
    DeviceArray a;
    a.backend_ = &backend;
    a.bytes_ = bytes.size();
    COIL_ASSIGN_OR_RETURN(a.buffer_, backend.Allocate(a.bytes_ + kGuardBytes));
    std::vector<uint8_t> init(bytes);
    init.resize(a.bytes_ + kGuardBytes, kGuardByte);
    COIL_RETURN_IF_ERROR(backend.CopyFromHost(a.buffer_.data(), init.data(), init.size()));
    return a;
  }
  static absl::StatusOr<DeviceArray> FromFloats(Backend& backend, const std::vector<float>& v,
                                                DType dtype = DType::kF32) {
    return Create(backend, Encode(v, dtype));
  }
  static absl::StatusOr<DeviceArray> FromInts(Backend& backend, const std::vector<int32_t>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return Create(backend, bytes);
  }

  void* data() const { return buffer_.data(); }
  // The array's bytes; fails if the guard region changed.
  absl::StatusOr<std::vector<uint8_t>> Read() const {
    std::vector<uint8_t> all(bytes_ + kGuardBytes);
    COIL_RETURN_IF_ERROR(backend_->CopyToHost(all.data(), buffer_.data(), all.size()));
    for (size_t i = bytes_; i < all.size(); ++i) {
      if (all[i] != kGuardByte) {
        return absl::InternalError(
            absl::StrCat("the op wrote ", i - bytes_, " bytes past the end of its tensor"));
      }
    }
    all.resize(bytes_);
    return all;
  }
  absl::StatusOr<std::vector<float>> ReadFloats() const {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Read());
    return Decode(bytes, DType::kF32);
  }
  absl::StatusOr<std::vector<int32_t>> ReadInts() const {
    COIL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Read());
    std::vector<int32_t> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }

 private:
  Backend* backend_ = nullptr;
  size_t bytes_ = 0;
  Buffer buffer_;
};

// A shuffled permutation's first `n` entries out of `rows` slots.
inline std::vector<int32_t> ShuffledSlots(std::mt19937_64& rng, int n, int rows) {
  std::vector<int32_t> all(rows);
  for (int i = 0; i < rows; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

}  // namespace coil::testing

#endif  // COIL_TESTS_UNIT_KERNELS_OP_TEST_UTIL_H_
