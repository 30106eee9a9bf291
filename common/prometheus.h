// Prometheus's text exposition format 0.0.4, written family by family:
// every exposition of the project (the switch's /metrics, agg-intcollector's,
// agg-cached's, agg-ps's --metrics file) goes through this one writer, so
// names, escaping and layout agree. DPDK-free.
//
//   PrometheusExposition out;
//   out.Family("aggswitch_x_total", "counter", "What x counts.");
//   out.Sample("aggswitch_x_total", {{"port", "p0"}}, 42);
//   std::string text = out.Take();
//
// Thread safety: PrometheusExposition is a value type, one thread at a
// time; the functions are pure [any].
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace aggswitch::common {

// The Content-Type of a text exposition format 0.0.4 response.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A label value with backslash, double quote and newline escaped (\\, \", \n). [any]
std::string EscapePrometheusLabelValue(std::string_view value);
// # HELP text with backslash and newline escaped (\\, \n). [any]
std::string EscapePrometheusHelp(std::string_view help);
// A float as Prometheus clients print it: the shortest text that reads back
// as the same double, in %g style ("1e-06", "0.0001", "0.5", "1"); "+Inf",
// "-Inf" and "NaN" as the format spells them. [any]
std::string FormatPrometheusFloat(double v);

// Writes families and samples. A family's samples follow its # HELP and
// # TYPE lines directly, as the format requires.
class PrometheusExposition {
 public:
  using Label = std::pair<std::string_view, std::string_view>;

  // A family's # HELP (escaped) and # TYPE lines.
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += EscapePrometheusHelp(help);
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  void Sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value) {
    Sample(name, labels, std::string_view(std::to_string(value)));
  }

  // A sample whose value is already formatted (FormatPrometheusFloat).
  void Sample(std::string_view name, std::initializer_list<Label> labels, std::string_view value) {
    out_ += name;
    if (labels.size() > 0) {
      out_ += '{';
      bool first = true;
      for (const auto& [key, val] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += key;
        out_ += "=\"";
        out_ += EscapePrometheusLabelValue(val);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }

  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace aggswitch::common
