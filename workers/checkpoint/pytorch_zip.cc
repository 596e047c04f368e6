#include "workers/checkpoint/pytorch_zip.h"

#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "workers/checkpoint/zip_archive.h"

namespace coil::checkpoint {

absl::StatusOr<std::vector<StoredTensor>> ParsePytorchZip(absl::Span<const uint8_t> file,
                                                          const std::string& path) {
  if (file.size() >= 2 && file[0] == 0x80) {
    return absl::UnimplementedError(absl::StrCat(
        path,
        " is a legacy (pre-1.6) torch.save file; coil reads the zip format: re-save it "
        "with a recent torch.save"));
  }
  COIL_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, ReadZipArchive(file, path));
  // The pickle is the one entry named <prefix>/data.pkl.
  const ZipEntry* pickle = nullptr;
  std::string prefix;
  for (const ZipEntry& entry : entries) {
    size_t slash = entry.name.find('/');
    if (slash != std::string::npos && entry.name.substr(slash) == "/data.pkl") {
      if (pickle != nullptr) {
        return absl::DataLossError(
            absl::StrCat(path, ": two data.pkl entries (", pickle->name, ", ", entry.name, ")"));
      }
      pickle = &entry;
      prefix = entry.name.substr(0, slash);
    }
  }
  if (pickle == nullptr) {
    return absl::DataLossError(absl::StrCat(
        path, ": no <name>/data.pkl entry; this zip archive is not a torch.save checkpoint"));
  }
  std::map<std::string, const ZipEntry*> by_name;
  for (const ZipEntry& entry : entries) by_name[entry.name] = &entry;
  auto byteorder = by_name.find(prefix + "/byteorder");
  if (byteorder != by_name.end()) {
    absl::string_view order(reinterpret_cast<const char*>(byteorder->second->data.data()),
                            byteorder->second->data.size());
    if (order != "little") {
      return absl::UnimplementedError(absl::StrCat(path, ": byteorder is '", absl::CEscape(order),
                                                   "'; coil reads little-endian checkpoints"));
    }
  }
  if (Crc32(pickle->data) != pickle->crc32) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", pickle->name, " fails its CRC-32 check; the file is corrupt"));
  }
  absl::StatusOr<std::vector<PickledTensor>> pickled = ParseTorchStateDict(pickle->data);
  if (!pickled.ok()) return Annotate(pickled.status(), absl::StrCat(path, ": ", pickle->name));

  std::vector<StoredTensor> tensors;
  for (const PickledTensor& source : *pickled) {
    const std::string& name = source.name;
    auto fail = [&](const std::string& detail) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", name, ": ", detail));
    };
    auto storage = by_name.find(absl::StrCat(prefix, "/data/", source.storage_key));
    if (storage == by_name.end()) {
      return fail(absl::StrCat("storage ", absl::CEscape(source.storage_key),
                               " has no entry in the archive"));
    }
    const ZipEntry& entry = *storage->second;
    uint64_t element_size = DTypeSize(source.dtype);
    if (source.storage_numel < 0 ||
        static_cast<uint64_t>(source.storage_numel) > entry.data.size() / element_size) {
      return fail(absl::StrCat("storage ", source.storage_key, " declares ", source.storage_numel,
                               " elements but its entry holds ", entry.data.size(), " bytes"));
    }
    StoredTensor tensor;
    tensor.name = name;
    tensor.dtype = source.dtype;
    tensor.shape = source.shape;
    COIL_ASSIGN_OR_RETURN(uint64_t bytes, TensorByteSize(tensor.shape, tensor.dtype, name));
    // Row-major strides (any stride on a dimension of size 1).
    int64_t expected_stride = 1;
    for (size_t d = source.shape.size(); bytes > 0 && d-- > 0;) {
      if (source.shape[d] != 1 && source.stride[d] != expected_stride) {
        return fail(absl::StrCat("stride [", absl::StrJoin(source.stride, ", "), "] for shape [",
                                 absl::StrJoin(source.shape, ", "),
                                 "] is not row-major; save contiguous tensors"));
      }
      expected_stride *= source.shape[d];
    }
    uint64_t numel = bytes / element_size;
    if (source.storage_offset < 0 ||
        static_cast<uint64_t>(source.storage_offset) >
            static_cast<uint64_t>(source.storage_numel) ||
        numel > static_cast<uint64_t>(source.storage_numel - source.storage_offset)) {
      return fail(absl::StrCat("elements [", source.storage_offset, ", ", source.storage_offset,
                               " + ", numel, ") fall outside storage ", source.storage_key, " of ",
                               source.storage_numel, " elements"));
    }
    uint64_t offset = static_cast<uint64_t>(source.storage_offset) * element_size;
    tensor.bytes = entry.data.subspan(offset, bytes);
    tensor.file = path;
    tensor.file_offset = entry.data_offset + offset;
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

std::string WritePytorchZip(
    const std::string& prefix, const std::vector<PickledTensor>& tensors,
    const std::vector<std::pair<std::string, absl::string_view>>& storages) {
  std::vector<ZipInput> entries;
  std::string pickle = WriteTorchStateDict(tensors);
  entries.push_back({prefix + "/data.pkl", pickle});
  entries.push_back({prefix + "/byteorder", "little"});
  for (const auto& [key, bytes] : storages) entries.push_back({prefix + "/data/" + key, bytes});
  entries.push_back({prefix + "/version", "3\n"});
  entries.push_back(
      {prefix + "/.data/serialization_id", "0000000000000000000000000000000000000000"});
  return WriteZipArchive(entries);
}

}  // namespace coil::checkpoint
