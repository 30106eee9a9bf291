// Prometheus's text exposition format, written family by family: every
// /metrics of the project (the switch's, agg-intcollector's) goes through
// this one writer, so names, escaping and layout agree.
//
//   PrometheusExposition out;
//   out.Family("aggswitch_x_total", "counter", "What x counts.");
//   out.Sample("aggswitch_x_total", {{"port", "p0"}}, 42);
//   std::string text = out.Take();
//
// Thread safety: a value type; one thread at a time.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "control/metrics.h"

namespace aggswitch::control {

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

  // A sample whose value is already formatted (FormatFloat).
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

}  // namespace aggswitch::control
