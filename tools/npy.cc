#include "tools/npy.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace coil {

std::string NpyHeaderF32(const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t dim : shape) absl::StrAppend(&dims, dim, ",");
  if (shape.size() > 1) dims.pop_back();  // (3,) for one dimension, (3,4) otherwise
  std::string dict =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // magic(6) + version(2) + length(2) + dict + '\n' is a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string header("\x93NUMPY\x01\x00", 8);
  header.push_back(static_cast<char>(dict.size() & 0xff));
  header.push_back(static_cast<char>(dict.size() >> 8));
  return header + dict;
}

absl::Status WriteNpyF32(const std::string& path, const std::vector<float>& data,
                         const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  if (count != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy shape holds ", count, " values but the data has ", data.size()));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot create ", path));
  const std::string header = NpyHeaderF32(shape);
  if (std::fwrite(header.data(), 1, header.size(), file.get()) != header.size() ||
      std::fwrite(data.data(), sizeof(float), data.size(), file.get()) != data.size()) {
    return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace coil
