#include "common/prometheus.h"

#include <charconv>
#include <cmath>

namespace aggswitch::common {
namespace {

std::string EscapeWith(std::string_view in, bool quotes) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quotes && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapePrometheusLabelValue(std::string_view value) { return EscapeWith(value, true); }

std::string EscapePrometheusHelp(std::string_view help) { return EscapeWith(help, false); }

std::string FormatPrometheusFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

}  // namespace aggswitch::common
