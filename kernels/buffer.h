// Buffer: memory owned by a backend (host memory on the CPU, device memory on a GPU),
// freed by the backend's own release function when the Buffer goes away. Move-only.
#ifndef COIL_KERNELS_BUFFER_H_
#define COIL_KERNELS_BUFFER_H_

#include <cstddef>
#include <functional>
#include <utility>

namespace coil {

class Buffer {
 public:
  using Release = std::function<void(void*)>;

  Buffer() = default;
  Buffer(void* data, size_t bytes, Release release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      release_ = std::move(other.release_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr && release_) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Release release_;
};

}  // namespace coil

#endif  // COIL_KERNELS_BUFFER_H_
