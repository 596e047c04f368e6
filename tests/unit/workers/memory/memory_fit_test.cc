#include "workers/memory_fit.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

MemoryNeed Need(int64_t weights, int64_t pools, const std::string& dtype = "f32") {
  MemoryNeed need;
  need.weight_bytes = weights;
  need.pool_bytes = pools;
  need.weight_dtype = dtype;
  need.pool_flags = "--memory-budget";
  need.rank = 1;
  need.ranks = 2;
  return need;
}

MemoryAvailable Host(int64_t bytes) {
  return MemoryAvailable{bytes, "host memory", false, "MemAvailable", "MemAvailable 1 KiB"};
}

TEST(CheckMemoryFitsTest, FitsUpToTheLastByte) {
  EXPECT_TRUE(CheckMemoryFits(Need(700, 300), Host(1000)).ok());
  EXPECT_TRUE(CheckMemoryFits(Need(0, 0), Host(0)).ok());
  const absl::Status over = CheckMemoryFits(Need(700, 301), Host(1000));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
}

TEST(CheckMemoryFitsTest, TheMessageNamesTheSizesAndWhatToDo) {
  const absl::Status status = CheckMemoryFits(Need(3 << 20, 1 << 20), Host(2 << 20));
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(std::string(status.message()),
            "model too big for host memory: rank 1/2 needs 3145728 B f32 weights + 1048576 B "
            "state/KV (4.0 MiB); 2097152 B (2.0 MiB) free (MemAvailable). Use more "
            "ranks/hosts, --weights bf16, smaller --memory-budget");
  // 16-bit weights already: no advice to convert them; no pools: no advice to shrink them.
  const absl::Status bf16 = CheckMemoryFits(Need(3 << 20, 0, "bf16"), Host(2 << 20));
  EXPECT_EQ(std::string(bf16.message()),
            "model too big for host memory: rank 1/2 needs 3145728 B bf16 weights + 0 B "
            "state/KV (3.0 MiB); 2097152 B (2.0 MiB) free (MemAvailable). Use more "
            "ranks/hosts");
}

// The agreed status carries at most 240 bytes of a cause (workers/comm/step_status.h): the
// message of a 16-rank job with hundreds of GB still fits whole.
TEST(CheckMemoryFitsTest, TheMessageFitsTheAgreedCause) {
  MemoryNeed need = Need(int64_t{123456789012}, int64_t{12345678901});
  need.rank = 12;
  need.ranks = 16;
  need.ranks_sharing = 8;
  const absl::Status status = CheckMemoryFits(
      need,
      MemoryAvailable{int64_t{1000000000000}, "host memory", false, "--max-host-memory", "..."});
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LE(status.message().size(), 240u) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("smaller --memory-budget"));
}

TEST(CheckMemoryFitsTest, TheReportHasEveryReading) {
  MemoryNeed need = Need(1536, 512);
  need.ranks_sharing = 2;
  const std::string report =
      MemoryReport(need, MemoryAvailable{4096, "host memory", false, "MemAvailable",
                                         "the least of MemAvailable 4096 bytes, cgroup ..."});
  EXPECT_EQ(report,
            "rank 1 of 2 needs 1536 bytes (1.5 KiB) of f32 weights and 512 bytes (0.5 KiB) of "
            "state rows and KV pages, 2048 bytes (2.0 KiB) in all (the 2 ranks on this host: "
            "4096 bytes (4.0 KiB)); host memory has 4096 bytes (4.0 KiB) for it: the least of "
            "MemAvailable 4096 bytes, cgroup ...");
}

TEST(CheckMemoryFitsTest, RanksOnOneHostShareItsMemory) {
  MemoryNeed need = Need(600, 100);
  EXPECT_TRUE(CheckMemoryFits(need, Host(1000)).ok());
  need.ranks_sharing = 2;  // 2 x 700 > 1000
  const absl::Status status = CheckMemoryFits(need, Host(1000));
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("(700 B), x2 ranks here; 1000 B"));
  EXPECT_TRUE(CheckMemoryFits(need, Host(1400)).ok());
}

TEST(CheckMemoryFitsTest, AGpuNamesItself) {
  const absl::Status status = CheckMemoryFits(
      Need(10, 10, "bf16"), MemoryAvailable{5, "GPU 3", true, "cudaMemGetInfo", "free of 80 GiB"});
  ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(status.message()),
            "model too big for GPU 3: rank 1/2 needs 10 B bf16 weights + 10 B state/KV (20 B); "
            "5 B (5 B) free (cudaMemGetInfo). Use more ranks/GPUs, smaller --memory-budget");
}

TEST(DescribeBytesTest, ExactBytesAndAScaledFigure) {
  EXPECT_EQ(DescribeBytes(1536), "1536 bytes (1.5 KiB)");
  EXPECT_EQ(DescribeBytes(int64_t{5} << 20), "5242880 bytes (5.0 MiB)");
  EXPECT_EQ(DescribeBytes(int64_t{3} << 30), "3221225472 bytes (3.0 GiB)");
}

TEST(ParseMemAvailableTest, ReadsKilobytes) {
  EXPECT_EQ(ParseMemAvailable("MemTotal:       24000000 kB\nMemFree:  100 kB\n"
                              "MemAvailable:   23014080 kB\nBuffers: 1 kB\n"),
            int64_t{23014080} * 1024);
  EXPECT_EQ(ParseMemAvailable("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: lots kB\n"), std::nullopt);
}

TEST(CgroupHeadroomTest, LimitLessUsageLessReclaimableCache) {
  EXPECT_EQ(CgroupHeadroom("1000\n", "600\n", "anon 400\ninactive_file 100\n"), 500);
  EXPECT_EQ(CgroupHeadroom("1000", "600", ""), 400);
  // v1: the hierarchy's total_inactive_file.
  EXPECT_EQ(CgroupHeadroom("1000", "600", "inactive_file 10\ntotal_inactive_file 200\n"), 600);
  EXPECT_EQ(CgroupHeadroom("1000", "1200", ""), 0);  // over its limit already
  EXPECT_EQ(CgroupHeadroom("max\n", "600", ""), std::nullopt);
  EXPECT_EQ(CgroupHeadroom("9223372036854771712", "600", ""), std::nullopt);  // v1: no limit
  EXPECT_EQ(CgroupHeadroom("1000", "", ""), std::nullopt);
}

class HostMemoryTest : public ::testing::Test {
 protected:
  HostMemoryTest()
      : root_(std::filesystem::temp_directory_path() /
              absl::StrCat("coil_memory_fit_",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_",
                           ::getpid())) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "cg");
    files_.meminfo = (root_ / "meminfo").string();
    files_.self_cgroup = (root_ / "self_cgroup").string();
    files_.cgroup_root = (root_ / "cg").string();
  }
  ~HostMemoryTest() override { std::filesystem::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  std::filesystem::path root_;
  HostMemoryFiles files_;
};

TEST_F(HostMemoryTest, V2TakesTheTightestCgroupOnThePath) {
  Write("meminfo", "MemAvailable: 5000 kB\n");  // 5120000 bytes
  Write("self_cgroup", "0::/a/b\n");
  Write("cg/a/memory.max", "1000000\n");
  Write("cg/a/memory.current", "300000\n");
  Write("cg/a/memory.stat", "inactive_file 100000\n");
  Write("cg/a/b/memory.max", "max\n");
  Write("cg/a/b/memory.current", "5\n");
  absl::StatusOr<MemoryAvailable> available = HostMemoryAvailable(0, files_);
  ASSERT_TRUE(available.ok()) << available.status();
  EXPECT_EQ(available->bytes, 800000);
  EXPECT_EQ(available->where, "host memory");
  EXPECT_FALSE(available->device);
  EXPECT_EQ(available->limited_by, "cgroup limit");
  EXPECT_THAT(available->source, HasSubstr("MemAvailable 5120000 bytes"));
  EXPECT_THAT(available->source, HasSubstr("cgroup /a (memory.max) 800000 bytes"));
  // A cap below both wins, and is named.
  available = HostMemoryAvailable(4096, files_);
  ASSERT_TRUE(available.ok());
  EXPECT_EQ(available->bytes, 4096);
  EXPECT_THAT(available->source, HasSubstr("--max-host-memory 4096 bytes"));
  EXPECT_EQ(available->limited_by, "--max-host-memory");
}

TEST_F(HostMemoryTest, V1ReadsTheMemoryControllerOrTheMountsTop) {
  Write("meminfo", "MemAvailable: 5000 kB\n");
  // The path names the host's hierarchy; the container sees its own cgroup at the top.
  Write("self_cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n");
  Write("cg/memory/memory.limit_in_bytes", "2000000\n");
  Write("cg/memory/memory.usage_in_bytes", "1500000\n");
  Write("cg/memory/memory.stat", "cache 1\ntotal_inactive_file 250000\n");
  absl::StatusOr<MemoryAvailable> available = HostMemoryAvailable(0, files_);
  ASSERT_TRUE(available.ok()) << available.status();
  EXPECT_EQ(available->bytes, 750000);
  EXPECT_THAT(available->source, HasSubstr("memory.limit_in_bytes"));
}

TEST_F(HostMemoryTest, MemAvailableAloneWhenNoCgroupLimits) {
  Write("meminfo", "MemAvailable: 5000 kB\n");
  Write("self_cgroup", "0::/\n");
  Write("cg/memory.max", "max\n");
  Write("cg/memory.current", "123\n");
  absl::StatusOr<MemoryAvailable> available = HostMemoryAvailable(0, files_);
  ASSERT_TRUE(available.ok()) << available.status();
  EXPECT_EQ(available->bytes, 5120000);
  EXPECT_EQ(available->source, "MemAvailable 5120000 bytes (4.9 MiB)");
  EXPECT_EQ(available->limited_by, "MemAvailable");
}

TEST_F(HostMemoryTest, NothingToReadIsAnErrorUnlessCapped) {
  absl::StatusOr<MemoryAvailable> available = HostMemoryAvailable(0, files_);
  EXPECT_EQ(available.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(available.status().message()), HasSubstr("--max-host-memory"));
  available = HostMemoryAvailable(1 << 20, files_);
  ASSERT_TRUE(available.ok());
  EXPECT_EQ(available->bytes, 1 << 20);
}

// This machine's own files: a number above 0 and no more than its MemAvailable.
TEST(HostMemoryAvailableTest, ThisMachine) {
  std::ifstream file("/proc/meminfo");
  std::string meminfo((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::optional<int64_t> mem_available = ParseMemAvailable(meminfo);
  if (!mem_available) GTEST_SKIP() << "no MemAvailable in /proc/meminfo";
  absl::StatusOr<MemoryAvailable> available = HostMemoryAvailable(0);
  ASSERT_TRUE(available.ok()) << available.status();
  EXPECT_GT(available->bytes, 0);
  // MemAvailable moves between the two reads; allow it 256 MiB.
  EXPECT_LE(available->bytes, *mem_available + (int64_t{256} << 20)) << available->source;
}

}  // namespace
}  // namespace coil
