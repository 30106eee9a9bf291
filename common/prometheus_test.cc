// The exposition writer: escaping, float formatting, a family's layout, and
// promtool accepting what it writes.
#include "common/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/lib/promtool.h"

namespace aggswitch::common {
namespace {

TEST(PrometheusTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapePrometheusLabelValue("plain"), "plain");
  EXPECT_EQ(EscapePrometheusLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapePrometheusHelp("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");
}

TEST(PrometheusTest, FloatsReadBackAsTheSameDouble) {
  EXPECT_EQ(FormatPrometheusFloat(0.5), "0.5");
  EXPECT_EQ(FormatPrometheusFloat(1), "1");
  EXPECT_EQ(FormatPrometheusFloat(1e-06), "1e-06");
  EXPECT_EQ(FormatPrometheusFloat(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPrometheusFloat(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatPrometheusFloat(std::nan("")), "NaN");
  const double third = 1.0 / 3;
  EXPECT_EQ(std::stod(FormatPrometheusFloat(third)), third);
}

TEST(PrometheusTest, AFamilysSamplesFollowItsHelpAndType) {
  PrometheusExposition out;
  out.Family("aggswitch_x_total", "counter", "What x\ncounts.");
  out.Sample("aggswitch_x_total", {{"port", "p\"0"}}, 42);
  out.Sample("aggswitch_x_total", {{"port", "p1"}, {"lcore", "2"}}, 7);
  out.Family("aggswitch_y_seconds", "gauge", "Y.");
  out.Sample("aggswitch_y_seconds", {}, FormatPrometheusFloat(0.25));
  const std::string text = out.Take();
  EXPECT_EQ(text,
            "# HELP aggswitch_x_total What x\\ncounts.\n"
            "# TYPE aggswitch_x_total counter\n"
            "aggswitch_x_total{port=\"p\\\"0\"} 42\n"
            "aggswitch_x_total{port=\"p1\",lcore=\"2\"} 7\n"
            "# HELP aggswitch_y_seconds Y.\n"
            "# TYPE aggswitch_y_seconds gauge\n"
            "aggswitch_y_seconds 0.25\n");
  const testing::PromtoolResult r = testing::RunPromtool(text);
  EXPECT_EQ(r.exit_code, 0) << r.output << text;
}

}  // namespace
}  // namespace aggswitch::common
