#include "workers/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/checkpoint/json_text.h"

namespace coil::checkpoint {

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

namespace {

absl::Status Corrupt(const std::string& path, const std::string& detail) {
  return absl::DataLossError(absl::StrCat(path, ": ", detail));
}

}  // namespace

absl::StatusOr<std::vector<StoredTensor>> ParseSafetensors(absl::Span<const uint8_t> file,
                                                           const std::string& path) {
  if (file.size() < 8) {
    return Corrupt(path, absl::StrCat("file is ", file.size(),
                                      " bytes, shorter than the 8-byte header length; the "
                                      "file is truncated"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | file[i];
  if (header_size > kMaxSafetensorsHeaderBytes || header_size > file.size() - 8) {
    return Corrupt(
        path, absl::StrCat("header length ", header_size, " at byte 0 exceeds the ",
                           file.size() - 8, " bytes after it (limit ", kMaxSafetensorsHeaderBytes,
                           "); the file is truncated or corrupt"));
  }
  uint64_t data_start = 8 + header_size;
  uint64_t data_size = file.size() - data_start;
  absl::string_view header(reinterpret_cast<const char*>(file.data() + 8), header_size);
  absl::StatusOr<nlohmann::json> parsed =
      ParseJsonText(header, absl::StrCat("safetensors header of ", path), true);
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  const nlohmann::json& root = *parsed;
  if (!root.is_object()) return Corrupt(path, "safetensors header is not a JSON object");

  std::vector<StoredTensor> tensors;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return Corrupt(path, "__metadata__ is not a JSON object");
      continue;
    }
    const nlohmann::json& entry = *it;
    auto field = [&](const char* key) -> const nlohmann::json* {
      auto found = entry.is_object() ? entry.find(key) : entry.end();
      return found == entry.end() ? nullptr : &*found;
    };
    const nlohmann::json* dtype_json = field("dtype");
    const nlohmann::json* shape_json = field("shape");
    const nlohmann::json* offsets_json = field("data_offsets");
    if (!dtype_json || !dtype_json->is_string() || !shape_json || !shape_json->is_array() ||
        !offsets_json || !offsets_json->is_array() || offsets_json->size() != 2 ||
        !(*offsets_json)[0].is_number_unsigned() || !(*offsets_json)[1].is_number_unsigned()) {
      return Corrupt(path, absl::StrCat("tensor ", name,
                                        ": header entry needs dtype (string), shape (list) "
                                        "and data_offsets ([begin, end]); got ",
                                        entry.dump()));
    }
    StoredTensor tensor;
    tensor.name = name;
    const std::string& dtype = dtype_json->get_ref<const std::string&>();
    if (dtype == "F32") {
      tensor.dtype = DType::kF32;
    } else if (dtype == "F16") {
      tensor.dtype = DType::kF16;
    } else if (dtype == "BF16") {
      tensor.dtype = DType::kBF16;
    } else {
      return absl::UnimplementedError(absl::StrCat(path, ": tensor ", name, " has dtype ", dtype,
                                                   "; coil reads F32, F16 and BF16"));
    }
    for (const nlohmann::json& dim : *shape_json) {
      if (!dim.is_number_unsigned()) {
        return Corrupt(path, absl::StrCat("tensor ", name, ": shape ", shape_json->dump(),
                                          " must hold non-negative integers"));
      }
      uint64_t value = dim.get<uint64_t>();
      if (value > (uint64_t{1} << 48)) {
        return Corrupt(path, absl::StrCat("tensor ", name, ": dimension ", value, " is over 2^48"));
      }
      tensor.shape.push_back(static_cast<int64_t>(value));
    }
    absl::StatusOr<uint64_t> expected = TensorByteSize(tensor.shape, tensor.dtype, name);
    if (!expected.ok()) return Corrupt(path, std::string(expected.status().message()));
    uint64_t begin = (*offsets_json)[0].get<uint64_t>();
    uint64_t end = (*offsets_json)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return Corrupt(path,
                     absl::StrCat("tensor ", name, ": data_offsets [", begin, ", ", end,
                                  "] fall outside the ", data_size, " data bytes (file offset ",
                                  data_start, "); the file is truncated or corrupt"));
    }
    if (end - begin != *expected) {
      return Corrupt(path, absl::StrCat("tensor ", name, ": ", dtype, " x ", shape_json->dump(),
                                        " needs ", *expected, " bytes but data_offsets [", begin,
                                        ", ", end, "] hold ", end - begin));
    }
    tensor.file = path;
    tensor.file_offset = data_start + begin;
    tensor.bytes = file.subspan(data_start + begin, end - begin);
    ranges.push_back({begin, end, tensors.size()});
    tensors.push_back(std::move(tensor));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& previous = ranges[i - 1];
    const Range& current = ranges[i];
    if (current.begin < previous.end) {
      return Corrupt(
          path, absl::StrCat("tensors ", tensors[previous.index].name, " [", previous.begin, ", ",
                             previous.end, ") and ", tensors[current.index].name, " [",
                             current.begin, ", ", current.end, ") overlap in the data"));
    }
  }
  return tensors;
}

std::string SerializeSafetensors(const std::vector<StoredTensor>& tensors) {
  // nlohmann's default object sorts keys; the data follows the order given, so offsets
  // are assigned first.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const StoredTensor& tensor : tensors) {
    header[tensor.name] = {{"dtype", SafetensorsDTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t size = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  out += text;
  for (const StoredTensor& tensor : tensors) {
    out.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  }
  return out;
}

}  // namespace coil::checkpoint
