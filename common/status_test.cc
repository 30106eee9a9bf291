// Tests of Status, Result<T> and the RETURN_IF_ERROR / ASSIGN_OR_RETURN macros.
#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace aggswitch::common {
namespace {

TEST(StatusTest, DefaultIsOk) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.message(), "");
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  const Status status = NotFound("port p9");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "port p9");
  EXPECT_EQ(status.ToString(), "NOT_FOUND: port p9");
}

TEST(StatusTest, EveryHelperMakesItsCode) {
  EXPECT_EQ(InvalidArgument("m").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NotFound("m").code(), StatusCode::kNotFound);
  EXPECT_EQ(AlreadyExists("m").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ResourceExhausted("m").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(FailedPrecondition("m").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Unavailable("m").code(), StatusCode::kUnavailable);
  EXPECT_EQ(Internal("m").code(), StatusCode::kInternal);
  EXPECT_EQ(OutOfRange("m").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Incomplete("m").code(), StatusCode::kIncomplete);
}

TEST(StatusTest, CodeNames) {
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_STREQ(StatusCodeName(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_STREQ(StatusCodeName(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_STREQ(StatusCodeName(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_STREQ(StatusCodeName(StatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(StatusCodeName(StatusCode::kFailedPrecondition), "FAILED_PRECONDITION");
  EXPECT_STREQ(StatusCodeName(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_STREQ(StatusCodeName(StatusCode::kInternal), "INTERNAL");
  EXPECT_STREQ(StatusCodeName(StatusCode::kOutOfRange), "OUT_OF_RANGE");
  EXPECT_STREQ(StatusCodeName(StatusCode::kIncomplete), "INCOMPLETE");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(99)), "UNKNOWN");
}

TEST(ResultTest, HoldsAValue) {
  Result<std::string> result(std::string("abc"));
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result.status().ok());
  EXPECT_EQ(result.value(), "abc");
  EXPECT_EQ(*result, "abc");
  EXPECT_EQ(result->size(), 3u);
  result.value() += "d";
  EXPECT_EQ(*result, "abcd");
}

TEST(ResultTest, HoldsAnError) {
  const Result<int> result = Unavailable("link down");
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(result.status().message(), "link down");
}

TEST(ResultTest, MovesOutMoveOnlyValues) {
  Result<std::unique_ptr<int>> result(std::make_unique<int>(7));
  ASSERT_TRUE(result.ok());
  std::unique_ptr<int> value = std::move(result).value();
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, 7);
}

Status FailIf(bool fail) {
  return fail ? Internal("failed") : Status::Ok();
}

// Counts how far it got, to show where RETURN_IF_ERROR returns.
Status TwoSteps(bool fail_first, bool fail_second, int& steps) {
  steps = 0;
  RETURN_IF_ERROR(FailIf(fail_first));
  ++steps;
  RETURN_IF_ERROR(FailIf(fail_second));
  ++steps;
  return Status::Ok();
}

TEST(MacroTest, ReturnIfErrorStopsAtTheFirstError) {
  int steps = -1;
  EXPECT_TRUE(TwoSteps(false, false, steps).ok());
  EXPECT_EQ(steps, 2);
  const Status first = TwoSteps(true, false, steps);
  EXPECT_EQ(first.code(), StatusCode::kInternal);
  EXPECT_EQ(steps, 0);
  EXPECT_FALSE(TwoSteps(false, true, steps).ok());
  EXPECT_EQ(steps, 1);
}

Result<int> Parse(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("not a number: " + text);
  }
  return std::stoi(text);
}

// Two ASSIGN_OR_RETURNs in one function, a declaration and an assignment.
Result<int> Sum(const std::string& a, const std::string& b) {
  ASSIGN_OR_RETURN(const int x, Parse(a));
  int y = 0;
  ASSIGN_OR_RETURN(y, Parse(b));
  return x + y;
}

TEST(MacroTest, AssignOrReturnAssignsOrPropagates) {
  const Result<int> sum = Sum("2", "40");
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 42);

  const Result<int> bad_first = Sum("x", "1");
  ASSERT_FALSE(bad_first.ok());
  EXPECT_EQ(bad_first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_first.status().message(), "not a number: x");

  const Result<int> bad_second = Sum("1", "");
  ASSERT_FALSE(bad_second.ok());
  EXPECT_EQ(bad_second.status().message(), "not a number: ");
}

Status UseInStatusFunction(const std::string& text, int& out) {
  ASSIGN_OR_RETURN(out, Parse(text));
  return Status::Ok();
}

TEST(MacroTest, AssignOrReturnWorksInAStatusFunction) {
  int out = 0;
  EXPECT_TRUE(UseInStatusFunction("17", out).ok());
  EXPECT_EQ(out, 17);
  const Status status = UseInStatusFunction("-", out);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 17);
}

}  // namespace
}  // namespace aggswitch::common
