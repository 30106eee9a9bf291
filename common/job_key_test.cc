#include "common/job_key.h"

#include <gtest/gtest.h>

namespace aggswitch::common {
namespace {

TEST(JobKeyTest, DecimalAndHexForms) {
  EXPECT_EQ(ParseJobKey("0"), 0u);
  EXPECT_EQ(ParseJobKey("24301"), 24301u);
  EXPECT_EQ(ParseJobKey("0x5eed"), 0x5eedu);
  EXPECT_EQ(ParseJobKey("0X5EED"), 0x5eedu);
  EXPECT_EQ(ParseJobKey("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseJobKey("0xffffffffffffffff"), UINT64_MAX);
  EXPECT_EQ(ParseJobKey("0x0000000000000001"), 1u) << "16 digits, leading zeros";
}

TEST(JobKeyTest, RejectsAnythingElse) {
  for (const char* bad : {"", "0x", "-1", "+1", "1.5", "12a", "0x5eedg", " 1", "1 ",
                          "18446744073709551616", "0x00000000000000001", "0x-1", "x12"}) {
    EXPECT_FALSE(ParseJobKey(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(JobKeyTest, OptionErrorsNameTheOptionAndTheText) {
  ASSERT_TRUE(ParseJobKeyOption("--key", "0x10").ok());
  EXPECT_EQ(*ParseJobKeyOption("--key", "0x10"), 16u);
  const auto bad = ParseJobKeyOption("--key", "ten");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--key: expected a job key"), std::string::npos);
  EXPECT_NE(bad.status().message().find("\"ten\""), std::string::npos);
}

}  // namespace
}  // namespace aggswitch::common
