// The CPU kernels' instruction-set forms that are meant to give the same bits do, case by
// case of the op harness (op_cases.h). The form is chosen once per process
// (COIL_MAX_CPU_ISA, kernels/cpu/cpu_features.h), so the test runs itself once per cap this
// machine can honour, each child printing a hash of every case's outputs, and compares:
//  - AVX2 with the AVX-512 fp32 forms: every Matmul (the bf16 weights take the AVX2 tiles
//    under that cap), SsmScan and MixerDecode case;
//  - AVX2 with the portable loops: Matmul with bf16 weights (bf16 products are exact, so an
//    FMA rounds as a multiply then an add) and MixerDecode (single-token runs: the
//    recurrence, fp32 and bf16 state);
//  - AVX2 with the AVX-512 BF16 forms: MixerDecode (a bf16 state rounded by vcvtneps2bf16,
//    denormals included).
// A machine without AVX2 skips; one without AVX-512 checks the second list only.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/unit/kernels/op_cases.h"
#include "tests/unit/kernels/op_test_util.h"

namespace coil::testing {
namespace {

constexpr char kDumpVariable[] = "COIL_ISA_BITS_DUMP";

// FNV-1a over the outputs' names and bytes.
uint64_t HashOutputs(const OpResult& result) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& [name, values] : result.outputs) {
    mix(name.data(), name.size());
    mix(values.data(), values.size() * sizeof(float));
  }
  return h;
}

// The child's part: every case on a 2-thread CPU backend, "BITS <case> <hash>" per line.
TEST(IsaBitsDump, PrintsEveryCaseHash) {
  if (std::getenv(kDumpVariable) == nullptr) GTEST_SKIP() << "run by IsaBitsTest in a child";
  auto backend = CreateBackend(BackendKind::kCpu, {.threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  for (auto& op_case : TestOpCases()) {
    op_case->MakeInputs(SeedFromName(op_case->Name()));
    auto result = op_case->Run(**backend);
    ASSERT_TRUE(result.ok()) << op_case->Name() << ": " << result.status();
    std::printf("BITS %s %llx\n", op_case->Name().c_str(),
                static_cast<unsigned long long>(HashOutputs(*result)));
  }
}

// Runs the dump under `cap` and returns case name -> hash.
std::map<std::string, std::string> HashesUnder(const std::string& cap) {
  char self[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  EXPECT_GT(length, 0) << "readlink /proc/self/exe";
  const std::string command = absl::StrCat("env COIL_MAX_CPU_ISA=", cap, " ", kDumpVariable, "=1 '",
                                           self, "' '--gtest_filter=IsaBitsDump.*'");
  std::map<std::string, std::string> hashes;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return hashes;
  char line[1024];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    if (fields.size() == 3 && fields[0] == "BITS") hashes[fields[1]] = fields[2];
  }
  EXPECT_EQ(pclose(pipe), 0) << command;
  return hashes;
}

void ExpectSameBits(const std::map<std::string, std::string>& a, const std::string& a_name,
                    const std::map<std::string, std::string>& b, const std::string& b_name,
                    bool (*compared)(const std::string&)) {
  int checked = 0;
  for (const auto& [name, hash] : a) {
    if (!compared(name)) continue;
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name << " missing under " << b_name;
    EXPECT_EQ(hash, it->second) << name << ": " << a_name << " and " << b_name << " differ";
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no case compared between " << a_name << " and " << b_name;
}

bool Fp32Forms(const std::string& name) {
  return absl::StartsWith(name, "Matmul/") || absl::StartsWith(name, "SsmScan/") ||
         absl::StartsWith(name, "MixerDecode");
}

bool ExactOnEveryForm(const std::string& name) {
  return absl::StartsWith(name, "Matmul/bf16") || absl::StartsWith(name, "MixerDecode");
}

bool MixerDecodeCases(const std::string& name) { return absl::StartsWith(name, "MixerDecode"); }

TEST(IsaBitsTest, FormsThatClaimTheSameBitsGiveThem) {
  const CpuFeatures& cpu = CpuFeatures::Get();
  if (!cpu.avx2_fma) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  const auto avx2 = HashesUnder("avx2");
  const auto portable = HashesUnder("portable");
  ASSERT_FALSE(avx2.empty());
  ASSERT_EQ(avx2.size(), portable.size());
  ExpectSameBits(avx2, "avx2", portable, "portable", &ExactOnEveryForm);
  if (cpu.avx512) {
    const auto avx512 = HashesUnder("avx512");
    ExpectSameBits(avx2, "avx2", avx512, "avx512", &Fp32Forms);
  }
  if (cpu.avx512_bf16) {
    const auto avx512_bf16 = HashesUnder("avx512_bf16");
    ExpectSameBits(avx2, "avx2", avx512_bf16, "avx512_bf16", &MixerDecodeCases);
  }
}

}  // namespace
}  // namespace coil::testing
