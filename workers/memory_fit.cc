#include "workers/memory_fit.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace coil {

std::string DescribeBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  std::string scaled;
  if (bytes >= (int64_t{1} << 30)) {
    scaled = absl::StrFormat("%.1f GiB", b / (1 << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    scaled = absl::StrFormat("%.1f MiB", b / (1 << 20));
  } else {
    scaled = absl::StrFormat("%.1f KiB", b / (1 << 10));
  }
  return absl::StrCat(bytes, " bytes (", scaled, ")");
}

namespace {

// "406 KiB", "1.4 GiB": two or three figures, for the short message.
std::string Scaled(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = b;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat(value < 10 ? "%.1f %s" : "%.0f %s", value, units[unit]);
}

}  // namespace

absl::Status CheckMemoryFits(const MemoryNeed& need, const MemoryAvailable& available) {
  const int sharing = std::max(need.ranks_sharing, 1);
  const int64_t required = need.total() * sharing;
  if (required <= available.bytes) return absl::OkStatus();
  std::string message =
      absl::StrCat("model too big for ", available.where, ": rank ", need.rank, "/", need.ranks,
                   " needs ", need.weight_bytes, " B ", need.weight_dtype, " weights + ",
                   need.pool_bytes, " B state/KV (", Scaled(need.total()), ")");
  if (sharing > 1) absl::StrAppend(&message, ", x", sharing, " ranks here");
  absl::StrAppend(&message, "; ", available.bytes, " B (", Scaled(available.bytes), ") free (",
                  available.limited_by, "). Use more ranks/", available.device ? "GPUs" : "hosts");
  if (need.weight_dtype == "f32") absl::StrAppend(&message, ", --weights bf16");
  if (!need.pool_flags.empty() && need.pool_bytes > 0) {
    absl::StrAppend(&message, ", smaller ", need.pool_flags);
  }
  return absl::ResourceExhaustedError(message);
}

std::string MemoryReport(const MemoryNeed& need, const MemoryAvailable& available) {
  const int sharing = std::max(need.ranks_sharing, 1);
  std::string report = absl::StrCat(
      "rank ", need.rank, " of ", need.ranks, " needs ", DescribeBytes(need.weight_bytes), " of ",
      need.weight_dtype, " weights and ", DescribeBytes(need.pool_bytes),
      " of state rows and KV pages, ", DescribeBytes(need.total()), " in all");
  if (sharing > 1) {
    absl::StrAppend(&report, " (the ", sharing,
                    " ranks on this host: ", DescribeBytes(need.total() * sharing), ")");
  }
  absl::StrAppend(&report, "; ", available.where, " has ", DescribeBytes(available.bytes),
                  " for it: ", available.source);
  return report;
}

std::optional<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t factor = 1;
    if (absl::ConsumeSuffix(&line, "kB")) factor = 1024;
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value) || value < 0) {
      return std::nullopt;
    }
    return value * factor;
  }
  return std::nullopt;
}

namespace {

// A memory.stat field ("inactive_file 123"); 0 when absent.
int64_t StatField(absl::string_view stat_text, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(stat_text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (fields.size() == 2 && fields[0] == name && absl::SimpleAtoi(fields[1], &value)) {
      return value;
    }
  }
  return 0;
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

struct Reading {
  int64_t bytes = 0;
  std::string what;
  std::string name;  // short: "MemAvailable", "cgroup memory.max"
};

// The smallest headroom of the cgroup directories from `dir` up to `root` (inclusive) that
// hold `limit_file`; nullopt when none limits.
std::optional<Reading> CgroupReading(const std::string& root, std::string dir,
                                     const char* limit_file, const char* usage_file,
                                     const char* label) {
  std::optional<Reading> best;
  while (true) {
    std::optional<std::string> limit = ReadText(dir + "/" + limit_file);
    std::optional<std::string> usage = ReadText(dir + "/" + usage_file);
    if (limit && usage) {
      std::optional<int64_t> headroom =
          CgroupHeadroom(*limit, *usage, ReadText(dir + "/memory.stat").value_or(""));
      if (headroom && (!best || *headroom < best->bytes)) {
        std::string name = dir.size() > root.size() ? dir.substr(root.size()) : "/";
        best = Reading{*headroom,
                       absl::StrCat("cgroup ", name, " (", label, ") ", DescribeBytes(*headroom)),
                       "cgroup limit"};
      }
    }
    if (dir.size() <= root.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
    if (dir.size() < root.size()) dir = root;
  }
  return best;
}

}  // namespace

std::optional<int64_t> CgroupHeadroom(absl::string_view limit_text, absl::string_view usage_text,
                                      absl::string_view stat_text) {
  int64_t limit = 0;
  int64_t usage = 0;
  limit_text = absl::StripAsciiWhitespace(limit_text);
  if (limit_text == "max" || !absl::SimpleAtoi(limit_text, &limit) || limit < 0 ||
      limit >= (int64_t{1} << 62)) {
    return std::nullopt;
  }
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(usage_text), &usage) || usage < 0) {
    return std::nullopt;
  }
  // v2 names it inactive_file; v1 total_inactive_file (the hierarchy's) beside its own.
  int64_t reclaimable = StatField(stat_text, "total_inactive_file");
  if (reclaimable == 0) reclaimable = StatField(stat_text, "inactive_file");
  const int64_t used = std::max<int64_t>(usage - reclaimable, 0);
  return std::max<int64_t>(limit - used, 0);
}

absl::StatusOr<MemoryAvailable> HostMemoryAvailable(int64_t cap_bytes,
                                                    const HostMemoryFiles& files) {
  std::vector<Reading> readings;
  if (std::optional<std::string> meminfo = ReadText(files.meminfo)) {
    if (std::optional<int64_t> bytes = ParseMemAvailable(*meminfo)) {
      readings.push_back(
          {*bytes, absl::StrCat("MemAvailable ", DescribeBytes(*bytes)), "MemAvailable"});
    }
  }
  // /proc/self/cgroup: "0::/path" for v2, "N:memory,...:/path" for v1's memory controller.
  // Inside a container the path may name the host's hierarchy while the container sees its
  // own cgroup at the mount's top: then the top is read.
  for (absl::string_view line :
       absl::StrSplit(ReadText(files.self_cgroup).value_or(""), '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    std::string path = fields[2] == "/" ? "" : fields[2];
    std::optional<Reading> reading;
    if (fields[0] == "0" && fields[1].empty()) {
      const std::string& root = files.cgroup_root;
      reading = CgroupReading(root, root + path, "memory.max", "memory.current", "memory.max");
    } else {
      std::vector<absl::string_view> controllers = absl::StrSplit(fields[1], ',');
      if (std::find(controllers.begin(), controllers.end(), "memory") == controllers.end()) {
        continue;
      }
      const std::string root = files.cgroup_root + "/memory";
      reading = CgroupReading(root, root + path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                              "memory.limit_in_bytes");
      if (!reading && !path.empty()) {
        reading = CgroupReading(root, root, "memory.limit_in_bytes", "memory.usage_in_bytes",
                                "memory.limit_in_bytes");
      }
    }
    if (reading) readings.push_back(*reading);
  }
  if (cap_bytes > 0) {
    readings.push_back({cap_bytes, absl::StrCat("--max-host-memory ", DescribeBytes(cap_bytes)),
                        "--max-host-memory"});
  }
  if (readings.empty()) {
    return absl::InternalError(
        absl::StrCat(files.meminfo,
                     " has no MemAvailable and no cgroup limits this process; give "
                     "--max-host-memory BYTES to say how much memory coil may use"));
  }
  MemoryAvailable available;
  available.where = "host memory";
  available.bytes = readings.front().bytes;
  available.limited_by = readings.front().name;
  std::vector<std::string> sources;
  for (const Reading& reading : readings) {
    if (reading.bytes < available.bytes) {
      available.bytes = reading.bytes;
      available.limited_by = reading.name;
    }
    sources.push_back(reading.what);
  }
  available.source = sources.size() == 1
                         ? sources.front()
                         : absl::StrCat("the least of ", absl::StrJoin(sources, ", "));
  return available;
}

int LocalRanksFromEnvironment() {
  const char* value = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int ranks = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &ranks) || ranks < 1) return 1;
  return ranks;
}

}  // namespace coil
