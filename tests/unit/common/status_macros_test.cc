// The propagation macros: each case's expected value follows from the macro's contract
// (evaluate once, return the error unchanged, move the value out).
#include "common/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace coil {
namespace {

absl::Status FailIf(bool fail, int* calls) {
  ++*calls;
  return fail ? absl::InvalidArgumentError("bad value 7; use 3") : absl::OkStatus();
}

absl::Status TwoSteps(bool fail_first, bool fail_second, int* calls) {
  COIL_RETURN_IF_ERROR(FailIf(fail_first, calls));
  COIL_RETURN_IF_ERROR(FailIf(fail_second, calls));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(int value) {
  if (value < 0) return absl::OutOfRangeError("negative");
  return std::make_unique<int>(value);
}

absl::StatusOr<int> Doubled(int value) {
  COIL_ASSIGN_OR_RETURN(std::unique_ptr<int> pointer, MakeInt(value));  // move-only value
  COIL_ASSIGN_OR_RETURN(auto again, MakeInt(*pointer + 1));  // two on one function
  return *pointer * 2 + (*again - *pointer - 1);
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstErrorAndKeepsIt) {
  int calls = 0;
  absl::Status status = TwoSteps(true, false, &calls);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "bad value 7; use 3");

  calls = 0;
  EXPECT_EQ(TwoSteps(false, true, &calls).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 2);

  calls = 0;
  EXPECT_TRUE(TwoSteps(false, false, &calls).ok());
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacrosTest, AssignOrReturnMovesValueOrReturnsError) {
  absl::StatusOr<int> good = Doubled(21);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  absl::StatusOr<int> bad = Doubled(-1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(bad.status().message(), "negative");
}

absl::Status WithContext(bool fail) {
  int calls = 0;
  COIL_RETURN_IF_ERROR_CONTEXT(FailIf(fail, &calls), "layer 3");
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ContextIsPrefixedAndCodeKept) {
  absl::Status status = WithContext(true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "layer 3: bad value 7; use 3");
  EXPECT_TRUE(WithContext(false).ok());
}

}  // namespace
}  // namespace coil
