// A read-only, private memory mapping of a whole file. Pages are faulted in only when
// touched, so reading a slice of a tensor brings in only that slice's pages: a
// tensor-parallel rank's resident memory stays its share of the weights.
#ifndef COIL_WORKERS_CHECKPOINT_MAPPED_FILE_H_
#define COIL_WORKERS_CHECKPOINT_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace coil::checkpoint {

class MappedFile {
 public:
  // NOT_FOUND when the file cannot be opened; an empty file maps to an empty span.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  struct Token {};  // only Open() can build one, through this constructor
  MappedFile(Token, std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_MAPPED_FILE_H_
