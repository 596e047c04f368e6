// The subset of the zip format torch.save writes: stored (uncompressed) entries, found
// through the central directory, with zip64 records when sizes or offsets need them.
// The reader hands out each entry's bytes as a span into the mapped file (no copy) after
// checking that every header and every entry lies inside the file; a compressed or
// encrypted entry is refused by name, as are duplicate names.
#ifndef COIL_WORKERS_CHECKPOINT_ZIP_ARCHIVE_H_
#define COIL_WORKERS_CHECKPOINT_ZIP_ARCHIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace coil::checkpoint {

struct ZipEntry {
  std::string name;
  absl::Span<const uint8_t> data;
  uint64_t data_offset = 0;  // in the file, for error messages
  uint32_t crc32 = 0;        // as recorded in the central directory
};

// Lists the entries of the zip archive `file` (`path` names it in errors).
absl::StatusOr<std::vector<ZipEntry>> ReadZipArchive(absl::Span<const uint8_t> file,
                                                     const std::string& path);

// CRC-32 (the zip polynomial 0xEDB88320).
uint32_t Crc32(absl::Span<const uint8_t> bytes);

// Writes a zip archive of stored entries whose data start at multiples of `alignment`
// bytes in the file (torch.save aligns to 64 so that storages can be mapped in place),
// padding the local header's extra field as PyTorch's writer does. zip64 records are
// written where sizes or offsets need them, or everywhere with `force_zip64` (for tests).
// `data` is not owned: it must outlive the call (no copy of a model's tensors is made).
struct ZipInput {
  std::string name;
  absl::string_view data;
};
std::string WriteZipArchive(const std::vector<ZipInput>& entries, uint64_t alignment = 64,
                            bool force_zip64 = false);

}  // namespace coil::checkpoint

#endif  // COIL_WORKERS_CHECKPOINT_ZIP_ARCHIVE_H_
