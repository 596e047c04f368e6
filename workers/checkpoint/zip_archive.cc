#include "workers/checkpoint/zip_archive.h"

#include <array>
#include <set>

#include "absl/strings/str_cat.h"

namespace coil::checkpoint {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr size_t kEndRecordSize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr uint64_t kMaxEntries = 1 << 20;

// Bounds-checked little-endian reads from the file.
class Reader {
 public:
  Reader(absl::Span<const uint8_t> file, const std::string& path) : file_(file), path_(path) {}

  bool Fits(uint64_t offset, uint64_t size) const {
    return offset <= file_.size() && size <= file_.size() - offset;
  }
  uint64_t Le(uint64_t offset, int bytes) const {
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | file_[offset + i];
    return value;
  }
  absl::Status Corrupt(uint64_t offset, const std::string& detail) const {
    return absl::DataLossError(absl::StrCat(path_, ": zip ", detail, " at byte ", offset,
                                            "; the file is truncated or corrupt"));
  }

 private:
  absl::Span<const uint8_t> file_;
  const std::string& path_;
};

}  // namespace

uint32_t Crc32(absl::Span<const uint8_t> bytes) {
  static constexpr std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = 0xffffffffu;
  for (uint8_t byte : bytes) crc = kTable[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

absl::StatusOr<std::vector<ZipEntry>> ReadZipArchive(absl::Span<const uint8_t> file,
                                                     const std::string& path) {
  Reader in(file, path);
  if (file.size() < kEndRecordSize) {
    return in.Corrupt(0, absl::StrCat("archive of ", file.size(), " bytes has no end record"));
  }
  // The end record is the last thing in the file, followed by a comment of up to 64 KiB.
  uint64_t end_offset = 0;
  bool found = false;
  uint64_t lowest = file.size() > kEndRecordSize + 65535 ? file.size() - kEndRecordSize - 65535 : 0;
  for (uint64_t offset = file.size() - kEndRecordSize + 1; offset-- > lowest;) {
    if (in.Le(offset, 4) == kEndSignature &&
        offset + kEndRecordSize + in.Le(offset + 20, 2) == file.size()) {
      end_offset = offset;
      found = true;
      break;
    }
  }
  if (!found) {
    return absl::DataLossError(
        absl::StrCat(path,
                     ": no zip end-of-central-directory record; the file is truncated or not a zip "
                     "archive"));
  }
  uint64_t entry_count = in.Le(end_offset + 10, 2);
  uint64_t directory_size = in.Le(end_offset + 12, 4);
  uint64_t directory_offset = in.Le(end_offset + 16, 4);
  if (in.Le(end_offset + 4, 2) != 0 || in.Le(end_offset + 6, 2) != 0) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": multi-disk zip archives are not supported"));
  }
  if (entry_count == 0xffff || directory_size == 0xffffffff || directory_offset == 0xffffffff) {
    // zip64: a locator just before the end record points at the zip64 end record.
    if (end_offset < 20 || in.Le(end_offset - 20, 4) != kZip64LocatorSignature) {
      return in.Corrupt(end_offset, "zip64 sizes without a zip64 locator");
    }
    uint64_t record = in.Le(end_offset - 20 + 8, 8);
    if (!in.Fits(record, 56) || in.Le(record, 4) != kZip64EndSignature) {
      return in.Corrupt(record, "missing zip64 end record");
    }
    entry_count = in.Le(record + 32, 8);
    directory_size = in.Le(record + 40, 8);
    directory_offset = in.Le(record + 48, 8);
  }
  if (entry_count > kMaxEntries) {
    return in.Corrupt(end_offset,
                      absl::StrCat("entry count ", entry_count, " over the limit ", kMaxEntries));
  }
  if (!in.Fits(directory_offset, directory_size)) {
    return in.Corrupt(directory_offset, absl::StrCat("central directory of ", directory_size,
                                                     " bytes outside the file"));
  }

  std::vector<ZipEntry> entries;
  std::set<std::string> names;
  uint64_t offset = directory_offset;
  uint64_t directory_end = directory_offset + directory_size;
  for (uint64_t i = 0; i < entry_count; ++i) {
    if (offset + kCentralHeaderSize > directory_end ||
        in.Le(offset, 4) != kCentralHeaderSignature) {
      return in.Corrupt(offset, absl::StrCat("central directory entry ", i, " is missing"));
    }
    uint64_t flags = in.Le(offset + 8, 2);
    uint64_t method = in.Le(offset + 10, 2);
    uint32_t crc = static_cast<uint32_t>(in.Le(offset + 16, 4));
    uint64_t compressed_size = in.Le(offset + 20, 4);
    uint64_t size = in.Le(offset + 24, 4);
    uint64_t name_length = in.Le(offset + 28, 2);
    uint64_t extra_length = in.Le(offset + 30, 2);
    uint64_t comment_length = in.Le(offset + 32, 2);
    uint64_t local_offset = in.Le(offset + 42, 4);
    uint64_t variable = name_length + extra_length + comment_length;
    if (offset + kCentralHeaderSize + variable > directory_end) {
      return in.Corrupt(offset,
                        absl::StrCat("central directory entry ", i, " overruns the directory"));
    }
    std::string name(reinterpret_cast<const char*>(file.data() + offset + kCentralHeaderSize),
                     name_length);
    // zip64 extra field: the 64-bit values of whichever 32-bit fields are saturated.
    uint64_t extra = offset + kCentralHeaderSize + name_length;
    uint64_t extra_end = extra + extra_length;
    while (extra + 4 <= extra_end) {
      uint64_t id = in.Le(extra, 2);
      uint64_t length = in.Le(extra + 2, 2);
      if (extra + 4 + length > extra_end)
        return in.Corrupt(extra, "extra field overruns its entry");
      if (id == 0x0001) {
        uint64_t field = extra + 4;
        auto take = [&](uint64_t& value) -> bool {
          if (value != 0xffffffff) return true;
          if (field + 8 > extra + 4 + length) return false;
          value = in.Le(field, 8);
          field += 8;
          return true;
        };
        if (!take(size) || !take(compressed_size) || !take(local_offset)) {
          return in.Corrupt(extra, absl::StrCat("zip64 field of entry ", name, " is short"));
        }
      }
      extra += 4 + length;
    }
    if (flags & 1) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": zip entry ", name, " is encrypted; coil reads plain archives"));
    }
    if (method != 0) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": zip entry ", name, " is compressed (method ", method,
          "); coil reads stored entries, as torch.save writes them: re-save the checkpoint "
          "with torch.save, not a zip tool"));
    }
    if (compressed_size != size) {
      return in.Corrupt(offset, absl::StrCat("stored entry ", name, " has compressed size ",
                                             compressed_size, " != size ", size));
    }
    if (!in.Fits(local_offset, kLocalHeaderSize) ||
        in.Le(local_offset, 4) != kLocalHeaderSignature) {
      return in.Corrupt(local_offset, absl::StrCat("local header of entry ", name, " is missing"));
    }
    uint64_t data_offset =
        local_offset + kLocalHeaderSize + in.Le(local_offset + 26, 2) + in.Le(local_offset + 28, 2);
    if (!in.Fits(data_offset, size)) {
      return in.Corrupt(data_offset, absl::StrCat("entry ", name, " of ", size,
                                                  " bytes runs past the end of the file"));
    }
    if (!names.insert(name).second) {
      return in.Corrupt(offset, absl::StrCat("entry name ", name, " appears twice"));
    }
    entries.push_back({name, file.subspan(data_offset, size), data_offset, crc});
    offset += kCentralHeaderSize + variable;
  }
  return entries;
}

namespace {

void PutLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string WriteZipArchive(const std::vector<ZipInput>& entries, uint64_t alignment,
                            bool force_zip64) {
  std::string out;
  std::string directory;
  constexpr uint64_t kSaturated = 0xffffffff;
  for (const ZipInput& entry : entries) {
    uint64_t local_offset = out.size();
    uint32_t crc = Crc32({reinterpret_cast<const uint8_t*>(entry.data.data()), entry.data.size()});
    bool big = force_zip64 || entry.data.size() >= kSaturated || local_offset >= kSaturated;
    // Pad the extra field (id 0x4650, "FP", as PyTorch's writer) so the data is aligned.
    uint64_t header_end = local_offset + kLocalHeaderSize + entry.name.size() + (big ? 20 : 0);
    uint64_t padding = (alignment - (header_end + 4) % alignment) % alignment;
    out.reserve(out.size() + kLocalHeaderSize + entry.name.size() + 24 + padding +
                entry.data.size());
    PutLe(out, kLocalHeaderSignature, 4);
    PutLe(out, big ? 45 : 20, 2);  // version needed
    PutLe(out, 0, 2);              // flags
    PutLe(out, 0, 2);              // method: stored
    PutLe(out, 0, 4);              // time and date
    PutLe(out, crc, 4);
    PutLe(out, big ? kSaturated : entry.data.size(), 4);
    PutLe(out, big ? kSaturated : entry.data.size(), 4);
    PutLe(out, entry.name.size(), 2);
    PutLe(out, (big ? 20 : 0) + 4 + padding, 2);
    out += entry.name;
    if (big) {
      PutLe(out, 0x0001, 2);
      PutLe(out, 16, 2);
      PutLe(out, entry.data.size(), 8);
      PutLe(out, entry.data.size(), 8);
    }
    PutLe(out, 0x4650, 2);
    PutLe(out, padding, 2);
    out.append(padding, 'Z');
    out.append(entry.data.data(), entry.data.size());

    PutLe(directory, kCentralHeaderSignature, 4);
    PutLe(directory, big ? 45 : 20, 2);  // version made by
    PutLe(directory, big ? 45 : 20, 2);  // version needed
    PutLe(directory, 0, 2);
    PutLe(directory, 0, 2);
    PutLe(directory, 0, 4);
    PutLe(directory, crc, 4);
    PutLe(directory, big ? kSaturated : entry.data.size(), 4);
    PutLe(directory, big ? kSaturated : entry.data.size(), 4);
    PutLe(directory, entry.name.size(), 2);
    PutLe(directory, big ? 28 : 0, 2);  // extra
    PutLe(directory, 0, 2);             // comment
    PutLe(directory, 0, 2);             // disk
    PutLe(directory, 0, 2);             // internal attributes
    PutLe(directory, 0, 4);             // external attributes
    PutLe(directory, big ? kSaturated : local_offset, 4);
    directory += entry.name;
    if (big) {
      PutLe(directory, 0x0001, 2);
      PutLe(directory, 24, 2);
      PutLe(directory, entry.data.size(), 8);
      PutLe(directory, entry.data.size(), 8);
      PutLe(directory, local_offset, 8);
    }
  }
  uint64_t directory_offset = out.size();
  out += directory;
  bool zip64 = force_zip64 || directory_offset >= kSaturated || entries.size() >= 0xffff;
  if (zip64) {
    uint64_t record = out.size();
    PutLe(out, kZip64EndSignature, 4);
    PutLe(out, 44, 8);  // size of the rest of the record
    PutLe(out, 45, 2);
    PutLe(out, 45, 2);
    PutLe(out, 0, 4);
    PutLe(out, 0, 4);
    PutLe(out, entries.size(), 8);
    PutLe(out, entries.size(), 8);
    PutLe(out, directory.size(), 8);
    PutLe(out, directory_offset, 8);
    PutLe(out, kZip64LocatorSignature, 4);
    PutLe(out, 0, 4);
    PutLe(out, record, 8);
    PutLe(out, 1, 4);
  }
  PutLe(out, kEndSignature, 4);
  PutLe(out, 0, 2);
  PutLe(out, 0, 2);
  PutLe(out, zip64 ? 0xffff : entries.size(), 2);
  PutLe(out, zip64 ? 0xffff : entries.size(), 2);
  PutLe(out, zip64 ? kSaturated : directory.size(), 4);
  PutLe(out, zip64 ? kSaturated : directory_offset, 4);
  PutLe(out, 0, 2);
  return out;
}

}  // namespace coil::checkpoint
