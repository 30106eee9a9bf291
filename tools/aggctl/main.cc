// aggctl: the operator's view of a running aggswitch, over its HTTP API.
//
//   aggctl [--server 127.0.0.1:9477] [--token-file PATH] [--json] [--timeout 5] ports
//   aggctl mac [--vlan 10] [--port uplink]
//   aggctl lcores
//   aggctl stats
//   aggctl jobs show [ID]
//   aggctl jobs add --id 7 --key 0xc0ffee (--members 4 | --node-ids 0-3 [--switch 100=8-15]...)
//                   [--nodes 2] [--ordered] [--upstream ADDR[:PORT] --upstream-node N
//                   [--upstream-vlan V]] [--timeout-ms MS] [--trigger incremental|batch]
//                   [--tan-strategy S --tan-candidate ADDR[:PORT][,hops=H]... | --tan-self]
//                   [--tan-member N] [--main-server ADDR[:PORT]] [--mode aggregate|store|both]
//   aggctl jobs rm ID
//   aggctl jobs unbind ID NODE
//   aggctl slots [--job 7] [--limit 1000]
//   aggctl bypass [--job 7] [--limit 1000]
//   aggctl stragglers --job 7 (--top N | --over SECONDS) [--ops K] [--apply [--max-excluded N] | --clear]
//   aggctl tan --job 7 [--strategy S --candidate ADDR[:PORT][,hops=H]... | --self]
//              [--member N | --no-member]
//   aggctl int show | int watch --file F | int decisions [--file F]
//   aggctl int paths [--collector 127.0.0.1:9478]
//
// Prints aligned tables by default and the API's JSON (pretty-printed) with
// --json. Exits 1 with a one-line reason when the daemon cannot be reached or
// answers with an error; a command line it cannot use exits with CLI11's code
// (and a bad --key with 2), sending nothing. One HTTP/1.1 request per run
// (common/http_client.h).
//
// The API token (http.token_file of the switch) comes from --token-file
// (or AGGCTL_TOKEN_FILE), or from AGGCTL_TOKEN itself; every request then
// carries it as "Authorization: Bearer <token>". Commands that change
// something (jobs add/rm, tan and stragglers --apply/--clear) need it.
#include <errno.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "common/http_client.h"
#include "common/job_key.h"
#include "common/status.h"
#include "common/version.h"
#include "control/api_routes.h"
#include "dataplane/counters.h"  // the port and lcore counters: the API's keys

namespace aggswitch::tools {
namespace {

// What aggctl talks to, for its messages: the switch, or for the int
// commands agg-intcollector.
std::string& Daemon() {
  static std::string name = "aggswitch";
  return name;
}

using common::Result;
using control::ApiPath;
namespace routes = control::routes;
// Insertion-ordered: --json keeps the daemon's key order, drops by reason
// come in the dataplane's order.
using json = nlohmann::ordered_json;

constexpr char kDefaultServer[] = "127.0.0.1:9477";

// ----------------------------------------------------------------------------
// HTTP client

using common::HttpReply;

std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// Sends one request (`body`, when not empty, as JSON) and reads the reply.
Result<HttpReply> HttpCall(const std::string& server, const std::string& method,
                           const std::string& target, const std::string& body,
                           const std::string& token, int timeout_ms) {
  return common::HttpCall({.server = server,
                           .method = method,
                           .target = target,
                           .body = body,
                           .token = token,
                           .timeout_ms = timeout_ms,
                           .peer = Daemon(),
                           .user_agent = "aggctl"});
}

// Query component encoding: everything but unreserved characters as %XX.
std::string UrlEncode(const std::string& in) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : in) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Sends `method target` and parses the JSON reply; a reply without a body
// (204) is an empty JSON object. An HTTP error becomes a Status that carries
// the server's {"error": ...} text.
Result<json> CallJson(const std::string& server, const std::string& method,
                      const std::string& target, const std::string& request_body,
                      const std::string& token, int timeout_ms) {
  ASSIGN_OR_RETURN(HttpReply reply,
                   HttpCall(server, method, target, request_body, token, timeout_ms));
  const std::string what = method == "GET" ? target : method + " " + target;
  json body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (reply.status < 200 || reply.status > 299) {
    std::string reason = "HTTP " + std::to_string(reply.status);
    if (body.is_object() && body.contains("error") && body["error"].is_string()) {
      reason += ": " + body["error"].get<std::string>();
    }
    if (reply.status == 401) {
      reason += token.empty() ? " (give it with --token-file or AGGCTL_TOKEN)"
                              : " (the token aggctl sent is not the switch's http.token_file)";
    }
    return common::FailedPrecondition(Daemon() + " at " + server + " answered " + what + " with " +
                                      reason);
  }
  if (reply.status == 204) return json::object();
  if (body.is_discarded()) {
    return common::Unavailable(Daemon() + " at " + server + " sent invalid JSON for " + what);
  }
  return body;
}

// ----------------------------------------------------------------------------
// Output

// A text table: left-aligned text columns, right-aligned numeric columns, two
// spaces between columns.
class Table {
 public:
  // A header starting with '>' marks a right-aligned column ('>' not printed).
  explicit Table(std::vector<std::string> headers) {
    for (std::string& h : headers) {
      const bool right = !h.empty() && h[0] == '>';
      right_.push_back(right);
      header_.push_back(right ? h.substr(1) : h);
    }
  }

  void AddRow(std::vector<std::string> row) {
    row.resize(header_.size());
    rows_.push_back(std::move(row));
  }
  bool empty() const { return rows_.empty(); }

  void Print(std::ostream& out, const std::string& indent = "") const {
    std::vector<size_t> width(header_.size());
    for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    }
    PrintRow(out, indent, header_, width);
    for (const auto& row : rows_) PrintRow(out, indent, row, width);
  }

 private:
  void PrintRow(std::ostream& out, const std::string& indent, const std::vector<std::string>& row,
                const std::vector<size_t>& width) const {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += right_[c] ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
    }
    out << line << '\n';
  }

  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

std::string U64(const json& v) {
  return std::to_string(v.get<uint64_t>());
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string LinkText(const json& port) {
  if (!port.at("link_up").get<bool>()) return "down";
  const uint32_t mbps = port.at("link_speed_mbps").get<uint32_t>();
  if (mbps == 0) return "up";
  if (mbps >= 1000 && mbps % 1000 == 0) return "up " + std::to_string(mbps / 1000) + "G";
  return "up " + std::to_string(mbps) + "M";
}

std::string RxQueuesText(const json& lcore) {
  std::string text;
  for (const json& q : lcore.at("rx")) {
    if (!text.empty()) text += ' ';
    text += q.at("port").get<std::string>() + "/" + U64(q.at("queue"));
  }
  return text.empty() ? "-" : text;
}

// "hairpin 5, tx_full 7", or "" when the port dropped nothing.
std::string NonZeroDrops(const json& port) {
  std::string text;
  for (const auto& [reason, count] : port.at("drops").items()) {
    if (count.get<uint64_t>() == 0) continue;
    if (!text.empty()) text += ", ";
    text += reason + " " + U64(count);
  }
  return text;
}

// The right-aligned header of counter column `key`: "rx_packets" -> ">RX-PACKETS".
std::string CounterHeader(std::string_view key) {
  std::string h = ">";
  for (char c : key) h += c == '_' ? '-' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return h;
}

// The per-port counters (AGG_PORT_COUNTERS), their headers and a port's values.
std::vector<std::string> PortCounterHeaders() {
  std::vector<std::string> h;
#define AGG_PORT_HEADER(name, help) h.push_back(CounterHeader(#name));
  AGG_PORT_COUNTERS(AGG_PORT_HEADER)
#undef AGG_PORT_HEADER
  return h;
}
void AddPortCounters(const json& p, std::vector<std::string>& row) {
#define AGG_PORT_VALUE(name, help) row.push_back(U64(p.at(#name)));
  AGG_PORT_COUNTERS(AGG_PORT_VALUE)
#undef AGG_PORT_VALUE
}

void PrintPorts(const json& j) {
  std::vector<std::string> headers = {"PORT", "DRIVER", "LINK", "VLAN"};
  for (std::string& h : PortCounterHeaders()) headers.push_back(std::move(h));
  headers.push_back(">DROPS");
  Table t(std::move(headers));
  for (const json& p : j.at("ports")) {
    std::vector<std::string> row = {p.at("name").get<std::string>(),
                                    p.at("driver").get<std::string>(), LinkText(p),
                                    p.at("vlan_mode").get<std::string>()};
    AddPortCounters(p, row);
    row.push_back(U64(p.at("dropped_packets")));
    t.AddRow(std::move(row));
  }
  t.Print(std::cout);
}

void PrintLcoreTable(const json& lcores, const std::string& indent) {
  std::vector<std::string> headers = {">LCORE", "RX-QUEUES", ">BUSY%", ">CYC/PKT"};
#define AGG_LCORE_HEADER(name, help) headers.push_back(CounterHeader(#name));
  AGG_LCORE_COUNTERS(AGG_LCORE_HEADER)
#undef AGG_LCORE_HEADER
  Table t(std::move(headers));
  for (const json& l : lcores) {
    const json& cpp = l.at("cycles_per_packet");
    std::vector<std::string> row = {U64(l.at("lcore")), RxQueuesText(l),
                                    Fixed(l.at("busy_percent").get<double>(), 1),
                                    cpp.is_null() ? "-" : Fixed(cpp.get<double>(), 1)};
#define AGG_LCORE_VALUE(name, help) row.push_back(U64(l.at(#name)));
    AGG_LCORE_COUNTERS(AGG_LCORE_VALUE)
#undef AGG_LCORE_VALUE
    t.AddRow(std::move(row));
  }
  t.Print(std::cout, indent);
}

void PrintLcores(const json& j) {
  PrintLcoreTable(j.at("lcores"), "");
}

std::string AgeText(const json& age) {
  if (age.is_null()) return "-";
  const long seconds = std::lround(age.get<double>());
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600)
    return std::to_string(seconds / 60) + "m" + std::to_string(seconds % 60) + "s";
  return std::to_string(seconds / 3600) + "h" + std::to_string(seconds % 3600 / 60) + "m";
}

void PrintMac(const json& j) {
  Table t({">VLAN", "MAC", "PORT", "TYPE", ">AGE"});
  for (const json& e : j.at("entries")) {
    t.AddRow({U64(e.at("vlan")), e.at("mac").get<std::string>(), e.at("port").get<std::string>(),
              e.at("type").get<std::string>(), AgeText(e.at("age_seconds"))});
  }
  if (!t.empty()) t.Print(std::cout);
  const json& table = j.at("table");
  std::cout << U64(j.at("count")) << " entries shown; table holds " << U64(table.at("size"))
            << " of " << U64(table.at("capacity")) << " (" << U64(table.at("static_entries"))
            << " static)\n";
}

// Collided chunks and the parameter node (docs/aggregation.md, "Collisions";
// docs/parameter-node.md): the lcores' counters summed, and the spare slots.
// Nothing when the switch does not aggregate.
void PrintCollisions(const json& j) {
  json sum = json::object();
  for (const json& l : j.at("lcores")) {
    if (!l.contains("aggregation")) continue;
    for (const auto& [name, v] : l.at("aggregation").items()) {
      if (v.is_number_unsigned()) sum[name] = sum.value(name, uint64_t{0}) + v.get<uint64_t>();
    }
  }
  const json* spare = j.contains("aggregation") && j.at("aggregation").is_object()
                          ? &j.at("aggregation").at("spare_slots")
                          : nullptr;
  if (sum.empty() && spare == nullptr) return;
  const auto n = [&](const char* name) { return U64(sum.value(name, uint64_t{0})); };
  std::cout << "\nCollisions and the parameter node\n"
            << "  collisions " << n("collisions") << ", escalated " << n("escalations")
            << ", sent on to spare slots " << n("relocated") << ", hints issued "
            << n("hints_issued") << ", hints refused " << n("hint_refused")
            << ", refused slot_busy " << n("slot_busy") << '\n';
  if (spare != nullptr) {
    std::cout << "  spare slots: " << U64(spare->at("leased")) << " of "
              << U64(spare->at("slots")) << " leased, " << U64(spare->at("relocations"))
              << " relocations, " << U64(spare->at("refused")) << " refused\n";
  }
  const json& agg = j.contains("aggregation") ? j.at("aggregation") : json();
  if (agg.is_object() && agg.contains("job_moves")) {
    std::cout << "  jobs moved to a partition of their own " << U64(agg.at("job_moves"))
              << "; sent on to a moved partition " << n("moved") << ", moved hints sent back home "
              << n("move_bounced") << '\n';
  }
  std::cout << "  to the parameter node: conflicts " << n("conflicts_to_ps")
            << ", forwarded unreduced " << n("at_ps_forwarded") << ", slots released "
            << n("released_to_ps") << ", refused no_parameter_node " << n("no_parameter_node")
            << "; chunks up as missing " << n("conflicts_up") << '\n';
}

void PrintStats(const json& j) {
  const json& build = j.at("build");
  std::cout << "aggswitch " << build.at("version").get<std::string>() << ", "
            << build.at("dpdk_version").get<std::string>() << "\n\n";

  std::vector<std::string> headers = {"PORT", "LINK"};
  for (std::string& h : PortCounterHeaders()) headers.push_back(std::move(h));
  headers.push_back(">DROPS");
#define AGG_PORT_DEVICE_HEADER(name, stat, help) headers.push_back(CounterHeader("dev_" #name));
  AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_HEADER)
#undef AGG_PORT_DEVICE_HEADER
  Table ports(std::move(headers));
  std::vector<std::pair<std::string, std::string>> drops;
  for (const json& p : j.at("ports")) {
    const json& dev = p.at("device");
    const std::string name = p.at("name").get<std::string>();
    std::vector<std::string> row = {name, LinkText(p)};
    AddPortCounters(p, row);
    row.push_back(U64(p.at("dropped_packets")));
#define AGG_PORT_DEVICE_VALUE(name, stat, help) row.push_back(U64(dev.at(#name)));
    AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_VALUE)
#undef AGG_PORT_DEVICE_VALUE
    ports.AddRow(std::move(row));
    const std::string reasons = NonZeroDrops(p);
    if (!reasons.empty()) drops.emplace_back(name, reasons);
  }
  std::cout << "Ports\n";
  ports.Print(std::cout, "  ");

  std::cout << "\nDrops by reason\n";
  if (drops.empty()) std::cout << "  none\n";
  for (const auto& [name, reasons] : drops) std::cout << "  " << name << ": " << reasons << '\n';

  // Summed over the lcores, in the daemon's order of reasons.
  json malformed = json::object();
  for (const json& l : j.at("lcores")) {
    if (!l.contains("aggregation") || !l.at("aggregation").contains("malformed")) continue;
    for (const auto& [reason, count] : l.at("aggregation").at("malformed").items()) {
      malformed[reason] = malformed.value(reason, uint64_t{0}) + count.get<uint64_t>();
    }
  }
  if (!malformed.empty()) {
    std::string text;
    for (const auto& [reason, count] : malformed.items()) {
      if (count.get<uint64_t>() == 0) continue;
      if (!text.empty()) text += ", ";
      text += reason + " " + U64(count);
    }
    std::cout << "\nMalformed aggregation datagrams by reason\n  "
              << (text.empty() ? "none" : text) << '\n';
  }

  PrintCollisions(j);

  const json& m = j.at("mac_table");
  const json& ev = m.at("events");
  const uint64_t aging = m.at("aging_seconds").get<uint64_t>();
  std::cout << "\nMAC table: " << U64(m.at("size")) << " of " << U64(m.at("capacity"))
            << " entries (" << U64(m.at("static_entries")) << " static), aging "
            << (aging == 0 ? std::string("off") : std::to_string(aging) + " s") << '\n'
            << "  learned " << U64(ev.at("learned")) << ", moved " << U64(ev.at("moved"))
            << ", aged " << U64(ev.at("aged")) << ", static conflicts "
            << U64(ev.at("static_conflicts")) << ", refused (table full) "
            << U64(ev.at("learn_refused")) << '\n';

  const double ghz = static_cast<double>(j.at("tsc_hz").get<uint64_t>()) / 1e9;
  std::cout << "\nLcores (TSC " << Fixed(ghz, 2) << " GHz)\n";
  PrintLcoreTable(j.at("lcores"), "  ");
}

std::string OptionalU64(const json& v) {
  return v.is_null() ? "-" : U64(v);
}

// Node ids as the config writes them: "0-3,8".
std::string NodeIdsText(const json& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    const uint64_t first = ids[i].get<uint64_t>();
    size_t k = i + 1;
    while (k < ids.size() && ids[k].get<uint64_t>() == first + (k - i)) ++k;
    if (!out.empty()) out += ',';
    out += std::to_string(first);
    if (k - i > 1) out += "-" + std::to_string(first + (k - 1 - i));
    i = k;
  }
  return out;
}

// {"mode","address","port","resolved"}: "-", "self", "10.0.9.50:47000" (with
// "?" while ARP has not answered).
std::string TanText(const json& tan) {
  const std::string mode = tan.at("mode").get<std::string>();
  if (mode == "self") return "self";
  if (mode != "remote") return "-";
  return tan.at("address").get<std::string>() + ":" + U64(tan.at("port")) +
         (tan.at("resolved").get<bool>() ? "" : "?");
}

// A job's parent switches (empty at the root). Daemons before "upstreams"
// show the one parent only.
json Upstreams(const json& job) {
  if (job.contains("upstreams")) return job.at("upstreams");
  const json& up = job.at("upstream");
  return up.is_null() ? json::array() : json::array({up});
}

// A job's parent switches: "root" (none), or their addresses, ","-separated
// ("?": unresolved). "-" from daemons that do not show the tree.
std::string UpstreamText(const json& job) {
  if (!job.contains("upstream")) return "-";
  const json ups = Upstreams(job);
  if (ups.empty()) return "root";
  std::string text;
  for (const json& up : ups) {
    text += (text.empty() ? "" : ",") + up.at("address").get<std::string>() + ":" +
            U64(up.at("port")) + (up.at("resolved").get<bool>() ? "" : "?");
  }
  return text;
}

// Whether the job's TAN is its parameter server (false from daemons that do
// not show it).
bool ParameterServer(const json& job) {
  return job.contains("parameter_server") && job.at("parameter_server").get<bool>();
}

// Whether the switch moved the job to a partition of its own (false from
// daemons that do not show it).
bool Moved(const json& job) {
  return job.contains("placement") && job.at("placement").contains("moved") &&
         job.at("placement").at("moved").is_object();
}

// Whether the job is in verify mode (false from daemons that do not show it).
bool VerifyMode(const json& job) {
  return job.contains("verify") && job.at("verify").get<bool>();
}

// A job's "counters" object; null with aggregation off (and absent from
// daemons older than the per-job counters).
json JobCounters(const json& job) {
  return job.contains("counters") ? job.at("counters") : json();
}

std::string JobCounter(const json& job, const char* name) {
  const json counters = JobCounters(job);
  return counters.is_object() && counters.contains(name) ? U64(counters.at(name)) : "-";
}

void PrintJobs(const json& j) {
  Table t({">JOB", "ORIGIN", ">INDEX", ">MEMBERS", ">LEARNED", ">NODES", "ORDERED", ">MIN-ACK",
           ">CONTRIB", ">COMPLETED", "UPSTREAM", "TAN"});
  bool unresolved = false;
  bool parameter_server = false;
  bool verify = false;
  bool moved = false;
  for (const json& job : j.at("jobs")) {
    const std::string upstream = UpstreamText(job);
    const std::string tan = job.contains("tan") ? TanText(job.at("tan")) : "-";
    unresolved |= upstream.back() == '?' || tan.back() == '?';
    const bool ps = ParameterServer(job);
    const bool checked = VerifyMode(job);
    parameter_server |= ps;
    verify |= checked;
    const bool is_moved = Moved(job);
    moved |= is_moved;
    t.AddRow({U64(job.at("id")), job.at("origin").get<std::string>() + (is_moved ? " (moved)" : ""),
              U64(job.at("index")),
              U64(job.at("members")), U64(job.at("learned")), U64(job.at("nodes")),
              job.at("ordered").get<bool>() ? "yes" : "no", OptionalU64(job.at("min_ack")),
              JobCounter(job, "contributions"), JobCounter(job, "completions"), upstream,
              tan + (ps ? " (ps)" : "") + (checked ? " (verify)" : "")});
  }
  if (!t.empty()) t.Print(std::cout);
  std::cout << U64(j.at("count")) << " of " << U64(j.at("capacity")) << " jobs; at most "
            << U64(j.at("max_fan_in")) << " members each; in-band registration "
            << (j.at("in_band_registration").get<bool>() ? "on" : "off") << '\n';
  if (unresolved) std::cout << "?: next hop not resolved by ARP yet\n";
  if (parameter_server) std::cout << "(ps): the TAN is the job's parameter server\n";
  if (verify) {
    std::cout << "(verify): verify mode, the TAN checks every complete chunk before the members "
                 "receive it\n";
  }
  if (moved) {
    std::cout << "(moved): a chunk collided and the job moved to a partition of its own "
                 "(aggctl jobs show JOB: placement.moved)\n";
  }
}

// A slot's age: chunks complete in microseconds, stuck ones age in seconds.
std::string SlotAgeText(const json& age) {
  const double seconds = age.get<double>();
  if (seconds < 1e-3) return Fixed(seconds * 1e6, 0) + "us";
  if (seconds < 1) return Fixed(seconds * 1e3, 1) + "ms";
  if (seconds < 60) return Fixed(seconds, 1) + "s";
  return AgeText(age);
}

// Busy slots as a table; `with_job` adds the JOB column.
void PrintSlotTable(const json& slots, bool with_job, const std::string& indent) {
  std::vector<std::string> headers = {">LCORE", ">SLOT", ">JOB", ">SEQ",   "STATE",
                                      ">COUNT", "DTYPE", "OP",   ">ELEMS", ">AGE"};
  if (!with_job) headers.erase(headers.begin() + 2);
  Table t(std::move(headers));
  for (const json& s : slots) {
    std::string state = s.at("state").get<std::string>();
    if (s.at("overflow").get<bool>()) state += " (overflow)";
    std::vector<std::string> row = {U64(s.at("lcore")),
                                    U64(s.at("index")),
                                    U64(s.at("job")),
                                    U64(s.at("seq")),
                                    state,
                                    U64(s.at("count")) + "/" + U64(s.at("expected")),
                                    s.at("dtype").get<std::string>(),
                                    s.at("op").get<std::string>(),
                                    U64(s.at("elem_count")),
                                    SlotAgeText(s.at("age_seconds"))};
    if (!with_job) row.erase(row.begin() + 2);
    t.AddRow(std::move(row));
  }
  t.Print(std::cout, indent);
}

void PrintSlots(const json& j) {
  const json& slots = j.at("slots");
  if (!slots.empty()) PrintSlotTable(slots, true, "");
  const json& job = j.at("filter").at("job");
  std::cout << U64(j.at("busy")) << " busy slots; " << U64(j.at("count")) << " shown"
            << (job.is_null() ? std::string() : " (job " + U64(job) + ")");
  if (j.at("truncated").get<bool>()) {
    std::cout << ", truncated at --limit " << U64(j.at("filter").at("limit"));
  }
  std::cout << '\n';
}

void PrintBypass(const json& j) {
  const json& entries = j.at("entries");
  if (!entries.empty()) {
    Table t({"LCORE", "JOB", "SEQ", "NODE", "EXPIRES IN"});
    for (const json& e : entries) {
      char ttl[32];
      std::snprintf(ttl, sizeof(ttl), "%.3f s", e.at("ttl_seconds").get<double>());
      t.AddRow({U64(e.at("lcore")), U64(e.at("job")), U64(e.at("seq")), U64(e.at("node")), ttl});
    }
    t.Print(std::cout, "");
  }
  const json& job = j.at("filter").at("job");
  std::cout << U64(j.at("live")) << " live bypass entries; " << U64(j.at("count")) << " shown"
            << (job.is_null() ? std::string() : " (job " + U64(job) + ")");
  if (j.at("truncated").get<bool>()) {
    std::cout << ", truncated at --limit " << U64(j.at("filter").at("limit"));
  }
  std::cout << '\n';
}

// The job's tree at this switch, as the config's keys describe it.
void PrintJobTree(const json& job) {
  std::cout << "\nTree\n";
  const json& workers = job.at("node_ids");
  std::cout << "  workers    " << (workers.empty() ? "none" : NodeIdsText(workers)) << '\n';
  const json& switches = job.at("switches");
  std::cout << "  switches   ";
  if (switches.empty()) std::cout << "none";
  for (size_t i = 0; i < switches.size(); ++i) {
    const json& child = switches[i];
    std::cout << (i > 0 ? ", " : "") << U64(child.at("node"));
    if (!child.at("covers").empty())
      std::cout << " (covers " << NodeIdsText(child.at("covers")) << ")";
  }
  std::cout << '\n';
  const json ups = Upstreams(job);
  std::cout << "  upstream   ";
  if (ups.empty()) std::cout << "none (this switch is the root)";
  if (ups.size() > 1) std::cout << "one of, by the chunk's addr_low mod " << ups.size() << ": ";
  for (size_t i = 0; i < ups.size(); ++i) {
    const json& up = ups[i];
    std::cout << (i > 0 ? "; " : "") << up.at("address").get<std::string>() << ':'
              << U64(up.at("port")) << ", as node " << U64(up.at("node"));
    if (up.at("vlan").get<uint64_t>() != 0) std::cout << " on VLAN " << U64(up.at("vlan"));
    std::cout << (up.at("resolved").get<bool>() ? " (resolved)" : " (not resolved yet)");
  }
  std::cout << '\n';
  const json& timeout = job.at("timeout_ms");
  std::cout << "  timer      "
            << (timeout.is_null()              ? std::string("?")
                : timeout.get<uint64_t>() == 0 ? std::string("off")
                                               : U64(timeout) + " ms")
            << ", trigger " << job.at("trigger").get<std::string>() << '\n';
  const json& tan = job.at("tan");
  const std::string mode = tan.at("mode").get<std::string>();
  std::cout << "  TAN        ";
  if (mode == "remote") {
    std::cout << tan.at("address").get<std::string>() << ':' << U64(tan.at("port"))
              << (tan.at("resolved").get<bool>() ? " (resolved)" : " (not resolved yet)");
  } else if (mode == "self") {
    std::cout << "this switch";
  } else {
    std::cout << (ups.empty() ? "none" : "chosen by the root");
  }
  if (ParameterServer(job)) std::cout << ", the job's parameter server";
  const json& member = job.at("tan_member");
  if (!member.is_null()) std::cout << "; run by worker " << U64(member) << " here";
  std::cout << '\n';
}

void PrintJob(const json& job) {
  const uint64_t nodes = job.at("nodes").get<uint64_t>();
  std::cout << "job " << U64(job.at("id")) << " (" << job.at("origin").get<std::string>()
            << ", index " << U64(job.at("index")) << "): " << U64(job.at("learned")) << " of "
            << U64(job.at("members")) << " members learned, "
            << (nodes == 1 ? std::string("root switch") : U64(job.at("nodes")) + " nodes")
            << (job.at("ordered").get<bool>() ? ", ordered" : "") << ", min ack "
            << OptionalU64(job.at("min_ack")) << '\n';
  if (job.contains("mode") && job.at("mode") != "aggregate") {
    const json& store = job.at("store");
    std::cout << "mode " << job.at("mode").get<std::string>() << ": " << U64(store.at("buffers"))
              << " of " << U64(store.at("quota")) << " store buffers held\n";
  }
  if (job.contains("node_ids")) PrintJobTree(job);

  const json counters = JobCounters(job);
  std::cout << "\nCounters\n";
  if (counters.is_null()) std::cout << "  none (aggregation is off)\n";
  if (counters.is_object()) {
    Table c({"COUNTER", ">VALUE"});
    for (const auto& [name, value] : counters.items()) c.AddRow({name, U64(value)});
    c.Print(std::cout, "  ");
  }

  std::cout << "\nMembers\n";
  Table t({">NODE", "PORT", ">VLAN", "MAC", "IP:UDP", ">ACK"});
  for (const json& m : job.at("learned_members")) {
    const bool has_address = !m.at("mac").is_null();
    const uint64_t vlan = has_address ? m.at("vlan").get<uint64_t>() : 0;
    t.AddRow({U64(m.at("node")), has_address ? m.at("port").get<std::string>() : "-",
              has_address && vlan != 0 ? std::to_string(vlan) : "-",
              has_address ? m.at("mac").get<std::string>() : "-",
              has_address ? m.at("ip").get<std::string>() + ":" + U64(m.at("udp_port")) : "-",
              OptionalU64(m.at("ack_watermark"))});
  }
  if (t.empty()) {
    std::cout << "  none seen yet\n";
  } else {
    t.Print(std::cout, "  ");
  }

  // Older daemons send no slots; a failed dump sends null and the reason.
  std::cout << "\nBusy slots\n";
  const json slots = job.contains("slots") ? job.at("slots") : json();
  if (slots.is_null()) {
    const json error = job.contains("slots_error") ? job.at("slots_error") : json();
    std::cout << "  unavailable"
              << (error.is_string() ? ": " + error.get<std::string>() : std::string()) << '\n';
  } else if (slots.empty()) {
    std::cout << "  none\n";
  } else {
    PrintSlotTable(slots, false, "  ");
    if (job.at("slots_truncated").get<bool>()) {
      std::cout << "  (" << slots.size() << " shown; more not listed, see aggctl slots --job "
                << U64(job.at("id")) << " --limit N)\n";
    }
  }
}

// jobs add: the new job, in one line.
// ", slots 512-767 (round_robin)" for a job placed in a partition of its
// region; "" for hash placement and from daemons that do not show it.
std::string PlacementText(const json& job) {
  if (!job.contains("placement") || !job.at("placement").contains("span")) return "";
  const json& p = job.at("placement");
  const uint64_t span = p.at("span").get<uint64_t>();
  const uint64_t size = p.at("size").get<uint64_t>();
  if (span == 0 || size == 0) return "";
  const uint64_t first = p.at("first").get<uint64_t>();
  const uint64_t base = p.at("base").get<uint64_t>();
  const uint64_t last = first + (base - first + span - 1) % size;
  return ", slots " + std::to_string(base) + "-" + std::to_string(last) + " (" +
         p.at("policy").get<std::string>() + ")";
}

void PrintAddedJob(const json& job) {
  std::cout << "added job " << U64(job.at("id")) << " (index " << U64(job.at("index")) << ", "
            << U64(job.at("members")) << " members, " << U64(job.at("nodes"))
            << (job.at("nodes").get<uint64_t>() == 1 ? " node" : " nodes")
            << (job.at("ordered").get<bool>() ? ", ordered" : "");
  if (job.contains("upstream")) {
    const std::string up = UpstreamText(job);
    std::cout << (up == "root" ? ", root here" : ", upstream " + up);
    const std::string tan = TanText(job.at("tan"));
    if (tan != "-") std::cout << ", TAN " << (tan == "self" ? "this switch" : tan);
    if (ParameterServer(job)) std::cout << ", its parameter server";
  }
  std::cout << PlacementText(job) << ")\n";
}

// ----------------------------------------------------------------------------

struct Options {
  std::string server = kDefaultServer;
  std::string collector = "127.0.0.1:9478";  // agg-intcollector's --http
  std::string token_file;
  bool json = false;
  double timeout_s = 5;
  std::optional<unsigned> vlan;
  std::optional<std::string> port;
  // jobs
  std::optional<uint32_t> job_id;
  std::optional<uint32_t> slot_limit;
  std::string job_key;
  std::optional<uint16_t> job_members;
  uint16_t job_nodes = 1;
  bool job_ordered = false;
  // jobs add: the tree, as the config's aggregation.jobs[] keys
  std::string job_node_ids;
  std::vector<std::string> job_switches;
  std::string job_upstream;
  uint16_t job_upstream_node = 0;
  uint16_t job_upstream_vlan = 0;
  std::optional<uint32_t> job_timeout_ms;
  std::string job_trigger;
  std::string job_tan_strategy;
  std::vector<std::string> job_tan_candidates;
  bool job_tan_self = false;
  std::optional<uint16_t> job_tan_member;
  bool job_parameter_server = false;
  bool job_verify = false;
  std::optional<uint32_t> job_placement_hint;
  std::string job_main_server;
  std::string job_mode;
  // int watch
  std::string watch_file;
  std::string decisions_file;
};

// The API token: AGGCTL_TOKEN, else the first line of `path` (surrounding
// white space dropped), else none.
Result<std::string> ApiToken(const std::string& path) {
  auto trim = [](std::string text) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return std::string();
    return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  };
  if (const char* env = std::getenv("AGGCTL_TOKEN"); env != nullptr && *env != '\0') {
    return trim(env);
  }
  if (path.empty()) return std::string();
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return common::Unavailable("cannot read the API token from " + path + ": " +
                               ErrnoText(errno != 0 ? errno : EIO));
  }
  return trim(line);
}

// Sends `method target` (with `request_body`) and prints the reply with
// `print`, or as JSON. Returns the exit code.
int Run(const Options& o, const std::string& method, const std::string& target,
        const std::string& request_body, void (*print)(const json&)) {
  const int timeout_ms = static_cast<int>(o.timeout_s * 1000);
  Result<std::string> token = ApiToken(o.token_file);
  if (!token.ok()) {
    std::cerr << "aggctl: " << token.status().message() << '\n';
    return 1;
  }
  Result<json> body = CallJson(o.server, method, target, request_body, *token, timeout_ms);
  if (!body.ok()) {
    std::cerr << "aggctl: " << body.status().message() << '\n';
    return 1;
  }
  if (o.json) {
    // A reply without a body (jobs rm) prints nothing.
    if (!body->empty()) {
      std::cout << body->dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    }
    return 0;
  }
  try {
    print(*body);
  } catch (const json::exception& e) {
    std::cerr << "aggctl: unexpected response from " << Daemon() << " at " << o.server << " for " << target
              << ": " << e.what() << '\n';
    return 1;
  }
  return 0;
}

// GET (or PUT) /api/v1/int: the switch's in-band telemetry and its watch list.
void PrintInt(const json& j) {
  std::cout << "node " << U64(j.at("node_id")) << ", INT port " << U64(j.at("int_port"))
            << ", hop budget " << U64(j.at("max_hops")) << ", collector "
            << (j.at("collector").is_null() ? "none" : j.at("collector").get<std::string>())
            << "\nfabric ports:";
  for (const json& p : j.at("fabric_ports")) std::cout << ' ' << p.get<std::string>();
  std::cout << "\n";
  const auto text = [](const json& v) {
    return v.is_null() ? std::string("-") : v.is_string() ? v.get<std::string>() : U64(v);
  };
  std::printf("%-16s %-5s %-18s %-18s %-6s %-10s %-7s %s\n", "WATCH", "VLAN", "SRC", "DST", "PORT",
              "JOB", "SAMPLE", "INSTRUCTIONS");
  for (const json& w : j.at("watch")) {
    std::printf("%-16s %-5s %-18s %-18s %-6s %-10s %-7s %s\n", w.at("name").get<std::string>().c_str(),
                text(w.at("vlan")).c_str(), text(w.at("src")).c_str(), text(w.at("dst")).c_str(),
                text(w.at("port")).c_str(), text(w.at("job")).c_str(), text(w.at("sample")).c_str(),
                w.at("instructions").get<std::string>().c_str());
  }
  std::cout << "datagrams:";
  for (const auto& [name, value] : j.at("counters").items()) std::cout << ' ' << name << ' ' << U64(value);
  const json& reports = j.at("reports");
  std::cout << "\nreports: sent " << U64(reports.at("sent")) << ", dropped "
            << U64(reports.at("dropped").at("ring_full")) << " (ring full) "
            << U64(reports.at("dropped").at("send_failed")) << " (send failed)\n";
}

// GET (or PUT) /api/v1/int/decisions: the switch's uplink groups and the
// path decisions in force.
void PrintDecisions(const json& j) {
  std::cout << "uplink groups:";
  if (j.at("groups").empty()) std::cout << " none";
  for (const json& g : j.at("groups")) {
    std::cout << ' ' << g.at("name").get<std::string>() << " (";
    std::string ports;
    for (const json& p : g.at("ports")) ports += (ports.empty() ? "" : " ") + p.get<std::string>();
    std::cout << ports << ')';
  }
  std::printf("\n%-18s %-16s %-6s %s\n", "DESTINATION", "PORT", "INDEX", "GROUP");
  for (const json& d : j.at("decisions")) {
    std::printf("%-18s %-16s %-6s %s\n", d.at("dst").get<std::string>().c_str(),
                d.at("port").get<std::string>().c_str(), U64(d.at("port_index")).c_str(),
                d.at("group").is_null() ? "- (no group: not applied)"
                                        : d.at("group").get<std::string>().c_str());
  }
}

// agg-intcollector's GET /api/v1/paths: each source-destination pair's
// paths, and which rules decided each.
void PrintIntPaths(const json& j) {
  const json& flows = j.at("flows");
  if (flows.empty()) {
    std::cout << "no complete paths in the last " << U64(j.at("window_seconds")) << " s\n";
    return;
  }
  for (const json& f : flows) {
    std::cout << f.at("src").get<std::string>() << " -> " << f.at("dst").get<std::string>() << '\n';
    std::printf("  %-4s %-4s %-8s %-12s %-10s %-28s %s\n", "PATH", "HOPS", "SAMPLES", "LATENCY",
                "FREE", "ROUTE (NODE:IN>OUT)", "DECIDED BY");
    const json& paths = f.at("paths");
    for (size_t i = 0; i < paths.size(); ++i) {
      const json& p = paths[i];
      std::string route;
      for (const json& h : p.at("route")) {
        if (!route.empty()) route += ' ';
        route += U64(h.at("node")) + ':' + U64(h.at("ingress_port")) + '>' + U64(h.at("egress_port"));
      }
      std::string decided;
      for (const auto& [rule, index] : f.at("decisions").items()) {
        if (!index.is_null() && index.get<size_t>() == i) decided += (decided.empty() ? "" : ", ") + rule;
      }
      char latency[32];
      std::snprintf(latency, sizeof(latency), "%.1f us", p.at("latency_ns").get<double>() / 1000);
      char free_share[16] = "-";
      if (!p.at("free_share").is_null()) {
        std::snprintf(free_share, sizeof(free_share), "%.1f%%", p.at("free_share").get<double>() * 100);
      }
      std::printf("  %-4zu %-4s %-8s %-12s %-10s %-28s %s\n", i, U64(p.at("hops")).c_str(),
                  U64(p.at("samples")).c_str(), latency, free_share, route.c_str(),
                  decided.empty() ? "-" : decided.c_str());
    }
  }
}

void PrintStragglers(const json& j) {
  std::cout << "job " << U64(j.at("job")) << ": " << U64(j.at("operations"))
            << " sampled operations\n";
  const json& predicted = j.at("predicted");
  if (predicted.empty()) {
    std::cout << "no stragglers predicted\n";
  } else {
    std::printf("%-8s %s\n", "NODE", "MEAN OFFSET");
    for (const json& m : predicted) {
      std::printf("%-8s %.6f s\n", U64(m.at("node")).c_str(), m.at("offset_seconds").get<double>());
    }
  }
  std::cout << "excluded:";
  if (j.at("excluded").empty()) std::cout << " none";
  for (const json& n : j.at("excluded")) std::cout << ' ' << U64(n);
  std::cout << '\n';
}

void PrintTan(const json& j) {
  std::cout << "job " << U64(j.at("job")) << (j.at("root").get<bool>() ? " (root here)" : "")
            << ": TAN ";
  const std::string mode = j.at("mode").get<std::string>();
  if (mode == "remote") {
    std::cout << j.at("address").get<std::string>() << ':' << U64(j.at("port"))
              << (j.at("resolved").get<bool>() ? " (resolved)" : " (not resolved yet)");
  } else if (mode == "self") {
    std::cout << "this switch";
  } else {
    std::cout << "none";
  }
  std::cout << '\n';
  const json& chosen_by = j.at("chosen_by");
  if (!chosen_by.is_null()) {
    std::cout << (chosen_by == "api" ? "chosen through the API: " : "chosen by the config: ")
              << j.at("strategy").get<std::string>();
    const json& candidates = j.at("candidates");
    if (!candidates.empty()) std::cout << " among";
    for (const json& c : candidates) {
      const uint64_t hops = c.at("hops").get<uint64_t>();
      std::cout << ' ' << c.at("address").get<std::string>() << ':' << U64(c.at("port")) << " ("
                << hops << (hops == 1 ? " hop)" : " hops)");
    }
    std::cout << '\n';
  }
  const json& member = j.at("member");
  std::cout << "member running the TAN here: " << (member.is_null() ? "none" : U64(member))
            << '\n';
}

// ----------------------------------------------------------------------------
// Command-line values that become JSON for the API. Each parser checks the
// syntax only; the switch checks the values (ranges, addresses, the job's
// rules) and names the key it refuses.

// A decimal number, all of `text`.
std::optional<uint64_t> ParseUnsigned(std::string_view text) {
  uint64_t value = 0;
  const auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || next != text.data() + text.size()) return std::nullopt;
  return value;
}

// ADDR[:PORT] as {"address"[, "port"]}.
std::optional<json> ParseAddressPort(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view address = text.substr(0, colon);
  if (address.empty()) return std::nullopt;
  json j = {{"address", std::string(address)}};
  if (colon != std::string_view::npos) {
    const std::optional<uint64_t> port = ParseUnsigned(text.substr(colon + 1));
    if (!port) return std::nullopt;
    j["port"] = *port;
  }
  return j;
}

// ADDR[:PORT][,hops=H] as a candidate {"address"[, "port"][, "hops"]}.
std::optional<json> ParseCandidate(std::string_view text) {
  const size_t comma = text.find(',');
  std::optional<json> c = ParseAddressPort(text.substr(0, comma));
  if (!c || comma == std::string_view::npos) return c;
  constexpr std::string_view kHops = "hops=";
  const std::string_view option = text.substr(comma + 1);
  if (option.substr(0, kHops.size()) != kHops) return std::nullopt;
  const std::optional<uint64_t> hops = ParseUnsigned(option.substr(kHops.size()));
  if (!hops) return std::nullopt;
  (*c)["hops"] = *hops;
  return c;
}

// "0-3,7" as a node id list: numbers, and "a-b" ranges as strings (as the
// config writes them).
std::optional<json> ParseNodeIds(std::string_view text) {
  json ids = json::array();
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      const std::optional<uint64_t> id = ParseUnsigned(item);
      if (!id) return std::nullopt;
      ids.push_back(*id);
    } else {
      if (!ParseUnsigned(item.substr(0, dash)) || !ParseUnsigned(item.substr(dash + 1))) {
        return std::nullopt;
      }
      ids.push_back(std::string(item));
    }
    if (comma == std::string_view::npos) return ids;
    text.remove_prefix(comma + 1);
  }
}

// NODE[=COVERS] as a child switch {"node"[, "covers"]}.
std::optional<json> ParseChildSwitch(std::string_view text) {
  const size_t eq = text.find('=');
  const std::optional<uint64_t> node = ParseUnsigned(text.substr(0, eq));
  if (!node) return std::nullopt;
  json child = {{"node", *node}};
  if (eq == std::string_view::npos) return child;
  std::optional<json> covers = ParseNodeIds(text.substr(eq + 1));
  if (!covers) return std::nullopt;
  child["covers"] = std::move(*covers);
  return child;
}

// A CLI11 check that `parse` takes the value; `expected` says what it takes
// (the option's type name shows it in --help).
CLI::Validator Syntax(std::optional<json> (*parse)(std::string_view), const std::string& expected) {
  return CLI::Validator(
      [parse, expected](std::string& value) {
        return parse(value) ? std::string() : "expected " + expected + ", got '" + value + "'";
      },
      "");
}

// The value of an option `Syntax(parse, ...)` has checked.
json Parsed(std::optional<json> (*parse)(std::string_view), const std::string& value) {
  return *parse(value);
}

// A TAN choice from the tan command's or jobs add's options: {"strategy",
// "candidates"} (fixed without a strategy), or {"strategy": "self"}; null
// when none was given.
json TanChoiceJson(const std::string& strategy, const std::vector<std::string>& candidates,
                   bool self) {
  if (self) return {{"strategy", "self"}};
  if (candidates.empty()) return nullptr;
  json tan = {{"strategy", strategy.empty() ? "fixed" : strategy}, {"candidates", json::array()}};
  for (const std::string& c : candidates) tan["candidates"].push_back(Parsed(ParseCandidate, c));
  return tan;
}

int Main(int argc, char** argv) {
  CLI::App app{"aggctl: inspect a running aggswitch through its HTTP API"};
  app.set_version_flag("--version", common::Version());
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand

  Options o;
  app.add_option("-s,--server", o.server, "host:port of the aggswitch HTTP API (http.listen)")
      ->envname("AGGCTL_SERVER")
      ->capture_default_str();
  app.add_option("--token-file", o.token_file,
                 "file holding the switch's API token (its http.token_file); AGGCTL_TOKEN may "
                 "hold the token itself")
      ->envname("AGGCTL_TOKEN_FILE");
  app.add_flag("--json", o.json, "print the API's JSON instead of tables");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for the daemon")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();

  std::string method = "GET";
  std::string target;
  std::string request_body;
  void (*print)(const json&) = nullptr;
  app.add_subcommand("ports", "ports: driver, link, VLAN mode, packet and drop counts")
      ->callback([&] {
        target = std::string(routes::kPorts);
        print = PrintPorts;
      });
  CLI::App* mac = app.add_subcommand("mac", "MAC table entries: VLAN, MAC, port, type, age");
  mac->add_option("--vlan", o.vlan, "only this VLAN")->check(CLI::Range(1, 4094));
  mac->add_option("--port", o.port, "only this port (name or index)");
  mac->callback([&] {
    std::string query;
    if (o.vlan) query += "vlan=" + std::to_string(*o.vlan);
    if (o.port) query += (query.empty() ? "" : "&") + std::string("port=") + UrlEncode(*o.port);
    target = std::string(routes::kMac) + (query.empty() ? "" : "?" + query);
    print = PrintMac;
  });
  app.add_subcommand("lcores", "worker lcores: queues, busy share, cycles per packet")
      ->callback([&] {
        target = std::string(routes::kLcores);
        print = PrintLcores;
      });
  app.add_subcommand("stats", "everything: port totals, drops by reason, MAC events, lcores")
      ->callback([&] {
        target = std::string(routes::kStats);
        print = PrintStats;
      });

  CLI::App* int_cmd =
      app.add_subcommand("int", "in-band network telemetry: the switch's, and agg-intcollector's paths");
  int_cmd->require_subcommand(1);
  int_cmd->add_subcommand("show", "the switch's node id, fabric ports, watch list and INT counters")
      ->callback([&] {
        target = std::string(routes::kInt);
        print = PrintInt;
      });
  CLI::App* int_watch = int_cmd->add_subcommand(
      "watch", "replace the switch's watch list (until a restart, or a reload that changes the file's)");
  int_watch
      ->add_option("--file", o.watch_file,
                   "JSON {\"watch\": [{\"name\", \"dst\", \"port\", \"sample\", \"instructions\", ...}]}: "
                   "the config's telemetry.watch entries; - reads standard input")
      ->required();
  CLI::App* int_decisions = int_cmd->add_subcommand(
      "decisions", "the switch's uplink groups and path decisions; with --file, replace them");
  int_decisions->add_option(
      "--file", o.decisions_file,
      "JSON {\"decisions\": [{\"dst\": \"a.b.c.d/len\", \"port\": name or index}]}; - reads "
      "standard input (agg-intcollector --apply sets them itself)");
  CLI::App* int_paths = int_cmd->add_subcommand(
      "paths", "each source-destination pair's paths, and the one each rule decided");
  int_paths
      ->add_option("--collector", o.collector, "host:port of agg-intcollector's HTTP API (--http)")
      ->envname("AGGCTL_COLLECTOR")
      ->capture_default_str();
  int_paths->callback([&] {
    o.server = o.collector;
    Daemon() = "agg-intcollector";
    target = "/api/v1/paths";
    print = PrintIntPaths;
  });

  CLI::App* slots =
      app.add_subcommand("slots", "busy aggregation slots: job, sequence, members counted, age");
  slots->add_option("--job", o.job_id, "only this job's slots")
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  slots->add_option("--limit", o.slot_limit, "list at most this many slots (default 1000)")
      ->check(CLI::Range(1, 100000));
  slots->callback([&] {
    std::string query;
    if (o.slot_limit) query += "limit=" + std::to_string(*o.slot_limit);
    if (o.job_id)
      query += (query.empty() ? "" : "&") + std::string("job=") + std::to_string(*o.job_id);
    target = std::string(routes::kSlots) + (query.empty() ? "" : "?" + query);
    print = PrintSlots;
  });

  CLI::App* bypass = app.add_subcommand(
      "bypass", "live bypass entries: members a slot timer left behind, until their late data");
  bypass->add_option("--job", o.job_id, "only this job's entries")
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  bypass->add_option("--limit", o.slot_limit, "list at most this many entries (default 1000)")
      ->check(CLI::Range(1, 100000));
  bypass->callback([&] {
    std::string query;
    if (o.slot_limit) query += "limit=" + std::to_string(*o.slot_limit);
    if (o.job_id)
      query += (query.empty() ? "" : "&") + std::string("job=") + std::to_string(*o.job_id);
    target = std::string(routes::kBypass) + (query.empty() ? "" : "?" + query);
    print = PrintBypass;
  });

  CLI::App* jobs = app.add_subcommand("jobs", "aggregation jobs: show, add, remove");
  jobs->require_subcommand(1);
  CLI::App* jobs_show = jobs->add_subcommand(
      "show", "list the jobs, or one job with its counters, members and busy slots");
  jobs_show->add_option("ID", o.job_id, "only this job, in detail")
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  jobs_show->callback([&] {
    target = std::string(routes::kJobs);
    print = PrintJobs;
    if (o.job_id) {
      target += "/" + std::to_string(*o.job_id);
      print = PrintJob;
    }
  });
  CLI::App* jobs_add = jobs->add_subcommand(
      "add",
      "add a job (it stays until removed or restart); the options are the config's "
      "aggregation.jobs[] keys, with the same defaults");
  jobs_add->add_option("--id", o.job_id, "job id, as in the packets' job_id")
      ->required()
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  jobs_add->add_option("--key", o.job_key, "job key: decimal or 0x-prefixed hex, up to 64 bits")
      ->required();
  jobs_add
      ->add_option("--members", o.job_members,
                   "members expected at this switch (default: as many as --node-ids and "
                   "--switch name)")
      ->check(CLI::Range(1, 65535));
  jobs_add->add_option("--nodes", o.job_nodes, "switches taking part; 1: this switch is the root")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  jobs_add->add_flag("--ordered", o.job_ordered,
                     "reduce floats in member order (bit-identical results)");
  jobs_add
      ->add_option("--node-ids", o.job_node_ids,
                   "the workers' node ids at this switch, e.g. 0-3,7 (default 0..members-1)")
      ->check(Syntax(ParseNodeIds, "node ids N or ranges A-B, comma-separated"))
      ->type_name("IDS");
  jobs_add
      ->add_option("--switch", o.job_switches,
                   "a child switch, also a member: its node id (its --upstream-node) and the "
                   "node ids below it, e.g. 100=0-3,7; repeatable")
      ->check(Syntax(ParseChildSwitch, "NODE or NODE=COVERS (COVERS like 0-3,7)"))
      ->type_name("NODE[=COVERS]");
  CLI::Option* upstream =
      jobs_add
          ->add_option("--upstream", o.job_upstream,
                       "the parent switch's aggregation address (port 47000 by default): this "
                       "switch is not the job's root")
          ->check(Syntax(ParseAddressPort, "ADDR[:PORT]"))
          ->type_name("ADDR[:PORT]");
  CLI::Option* upstream_node =
      jobs_add->add_option("--upstream-node", o.job_upstream_node, "this switch's node id there")
          ->check(CLI::Range(0, 65534));
  CLI::Option* upstream_vlan =
      jobs_add
          ->add_option("--upstream-vlan", o.job_upstream_vlan,
                       "the VLAN to resolve the parent on (default: the aggregation address's)")
          ->check(CLI::Range(0, 4094));
  upstream->needs(upstream_node);
  upstream_node->needs(upstream);
  upstream_vlan->needs(upstream);
  jobs_add
      ->add_option("--timeout-ms", o.job_timeout_ms,
                   "slot timer, 0: off (default: aggregation.timeout_ms)")
      ->check(CLI::Range(0, 3600000));
  jobs_add
      ->add_option("--trigger", o.job_trigger, "when a slot reduces (default: aggregation.trigger)")
      ->check(CLI::IsMember({"incremental", "batch"}));
  CLI::Option* job_strategy =
      jobs_add
          ->add_option("--tan-strategy", o.job_tan_strategy,
                       "how the root picks the TAN among --tan-candidate (default fixed: the "
                       "first; without any TAN option: aggregation.tan)")
          ->check(CLI::IsMember({"fixed", "random", "least_load", "fewest_hops"}));
  CLI::Option* job_candidate =
      jobs_add
          ->add_option("--tan-candidate", o.job_tan_candidates,
                       "a TAN the root may pick (port 47000, hops 0 by default); repeatable")
          ->check(Syntax(ParseCandidate, "ADDR[:PORT][,hops=H]"))
          ->type_name("ADDR[:PORT][,hops=H]");
  CLI::Option* job_self =
      jobs_add->add_flag("--tan-self", o.job_tan_self, "the root merges the late data itself")
          ->excludes(job_strategy, job_candidate);
  job_strategy->needs(job_candidate);
  for (CLI::Option* tan_option : {job_strategy, job_candidate, job_self}) {
    tan_option->excludes(upstream);
  }
  jobs_add
      ->add_option("--tan-member", o.job_tan_member,
                   "a worker of --node-ids that also runs the job's TAN: when it is late, no "
                   "bypass entry for it (it keeps its own data)")
      ->check(CLI::Range(0, 65534));
  jobs_add
      ->add_flag("--parameter-server", o.job_parameter_server,
                 "a root job whose TAN (agg-ps --sgd) is its parameter server: every chunk goes "
                 "to it and the members receive its answer; needs a remote TAN")
      ->excludes(upstream, job_self);
  jobs_add
      ->add_flag("--verify", o.job_verify,
                 "verify mode: the root sends every complete chunk to the job's parameter node "
                 "(its remote TAN, an agg-ps) and the members receive only its answer")
      ->excludes(upstream, job_self);
  jobs_add->add_option("--placement-hint", o.job_placement_hint,
                       "place the job's chunks in a partition of its slot quota that starts at "
                       "this slot index of the config and API jobs' region, whatever "
                       "aggregation.placement says");
  jobs_add->add_option("--main-server", o.job_main_server,
                       "the job's main server: what it sends the job as DISTRIBUTE is replicated "
                       "to every member")
      ->type_name("ADDR[:PORT]");
  jobs_add->add_option("--mode", o.job_mode,
                       "aggregate the members' contributions (the default), store them for FETCH, "
                       "or both")
      ->check(CLI::IsMember({"aggregate", "store", "both"}));
  int_decisions->callback([&] {
    target = std::string(routes::kDecisions);
    print = PrintDecisions;
    if (o.decisions_file.empty()) return;
    std::ifstream file;
    std::istream& in = o.decisions_file == "-" ? std::cin : (file.open(o.decisions_file), file);
    if (!in) throw CLI::ValidationError("--file", "cannot read " + o.decisions_file);
    request_body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    method = "PUT";
  });
  int_watch->callback([&] {
    std::ifstream file;
    std::istream& in = o.watch_file == "-" ? std::cin : (file.open(o.watch_file), file);
    if (!in) throw CLI::ValidationError("--file", "cannot read " + o.watch_file);
    request_body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    method = "PUT";
    target = std::string(routes::kInt);
    print = PrintInt;
  });
  json job_body;  // POST /api/v1/jobs without its key, which is checked after parsing
  jobs_add->callback([&] {
    if (!o.job_members && o.job_node_ids.empty() && o.job_switches.empty()) {
      throw CLI::ValidationError("--members",
                                 "give the member count, or the members with --node-ids and "
                                 "--switch");
    }
    method = "POST";
    target = std::string(routes::kJobs);
    job_body = {
        {"id", *o.job_id}, {"key", nullptr}, {"nodes", o.job_nodes}, {"ordered", o.job_ordered}};
    if (o.job_members) job_body["members"] = *o.job_members;
    if (!o.job_node_ids.empty()) job_body["node_ids"] = Parsed(ParseNodeIds, o.job_node_ids);
    if (!o.job_switches.empty()) {
      job_body["switches"] = json::array();
      for (const std::string& child : o.job_switches) {
        job_body["switches"].push_back(Parsed(ParseChildSwitch, child));
      }
    }
    if (!o.job_upstream.empty()) {
      json up = Parsed(ParseAddressPort, o.job_upstream);
      up["node"] = o.job_upstream_node;
      up["vlan"] = o.job_upstream_vlan;
      job_body["upstream"] = std::move(up);
    }
    if (o.job_timeout_ms) job_body["timeout_ms"] = *o.job_timeout_ms;
    if (!o.job_trigger.empty()) job_body["trigger"] = o.job_trigger;
    json tan = TanChoiceJson(o.job_tan_strategy, o.job_tan_candidates, o.job_tan_self);
    if (!tan.is_null()) job_body["tan"] = std::move(tan);
    if (o.job_tan_member) job_body["tan_member"] = *o.job_tan_member;
    if (o.job_parameter_server) job_body["parameter_server"] = true;
    if (o.job_verify) job_body["verify"] = true;
    if (o.job_placement_hint) job_body["placement_hint"] = *o.job_placement_hint;
    if (!o.job_main_server.empty()) job_body["main_server"] = o.job_main_server;
    if (!o.job_mode.empty()) job_body["mode"] = o.job_mode;
    print = PrintAddedJob;
  });
  CLI::App* jobs_rm = jobs->add_subcommand("rm", "remove a job");
  jobs_rm->add_option("ID", o.job_id, "the job to remove")
      ->required()
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  jobs_rm->callback([&] {
    method = "DELETE";
    target = ApiPath(routes::kJob, *o.job_id);
    print = [](const json&) {};
  });
  uint16_t unbind_node = 0;
  CLI::App* jobs_unbind = jobs->add_subcommand(
      "unbind", "forget the address a member is bound to (a restarted rank); its next datagram binds it");
  jobs_unbind->add_option("ID", o.job_id, "the job")
      ->required()
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  jobs_unbind->add_option("NODE", unbind_node, "the member's node id (its rank)")
      ->required()
      ->check(CLI::Range(0, 65534));
  jobs_unbind->callback([&] {
    method = "DELETE";
    target = ApiPath(routes::kJobMember, *o.job_id, unbind_node);
    print = [](const json&) {};
  });

  uint32_t straggler_job = 0;
  std::optional<uint32_t> straggler_top;
  std::optional<double> straggler_over;
  uint32_t straggler_ops = 0;
  bool straggler_apply = false;
  std::optional<uint32_t> straggler_max_excluded;
  bool straggler_clear = false;
  CLI::App* stragglers = app.add_subcommand(
      "stragglers", "predict a job's stragglers at this switch from past arrival offsets");
  stragglers->add_option("--job", straggler_job, "the job")
      ->required()
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  CLI::Option* top = stragglers->add_option("--top", straggler_top, "the N latest members")
                         ->check(CLI::Range(1, 65535));
  CLI::Option* over =
      stragglers->add_option("--over", straggler_over,
                             "members whose mean arrival offset is strictly above SECONDS")
          ->check(CLI::NonNegativeNumber);
  top->excludes(over);
  stragglers->add_option("--ops", straggler_ops,
                         "use the last K sampled operations (default: all kept, up to 256)");
  stragglers->add_flag("--apply", straggler_apply,
                       "exclude the predicted members: the switch stops waiting for them and "
                       "tells them to flag their data for bypass");
  stragglers
      ->add_option("--max-excluded", straggler_max_excluded,
                   "with --apply: exclude at most N members, the latest first (default " +
                       std::to_string(aggregator::kDefaultReservedMissingIds) +
                       ", the node ids a client leaves room for in each chunk: "
                       "reserve_missing_ids)")
      ->check(CLI::Range(1, 255));
  stragglers->add_flag("--clear", straggler_clear, "include every member again")->excludes(top, over);
  stragglers->callback([&] {
    if (!straggler_clear && !straggler_top && !straggler_over) {
      throw CLI::ValidationError("stragglers", "give --top N or --over SECONDS (or --clear)");
    }
    if (straggler_max_excluded && !straggler_apply) {
      throw CLI::ValidationError("stragglers", "--max-excluded goes with --apply");
    }
    const std::string base = ApiPath(routes::kJobStragglers, straggler_job);
    print = PrintStragglers;
    if (!straggler_apply && !straggler_clear) {
      target = base + "?" +
               (straggler_top ? "top=" + std::to_string(*straggler_top)
                              : "over=" + std::to_string(*straggler_over)) +
               (straggler_ops ? "&ops=" + std::to_string(straggler_ops) : "");
      return;
    }
    method = "POST";
    target = base;
    json body = {{"apply", straggler_apply}, {"clear", straggler_clear}};
    if (straggler_top) body["top"] = *straggler_top;
    if (straggler_over) body["over"] = *straggler_over;
    if (straggler_ops) body["ops"] = straggler_ops;
    if (straggler_max_excluded) body["max_excluded"] = *straggler_max_excluded;
    request_body = body.dump();
  });

  uint32_t tan_job = 0;
  std::string tan_strategy;
  std::vector<std::string> tan_candidates;
  bool tan_self = false;
  std::optional<uint32_t> tan_member;
  bool tan_no_member = false;
  CLI::App* tan = app.add_subcommand(
      "tan", "show or choose a job's timeout aggregation node (TAN) at this switch");
  tan->add_option("--job", tan_job, "the job")
      ->required()
      ->check(CLI::Range(uint32_t{1}, uint32_t{4294967295u}));
  CLI::Option* strategy =
      tan->add_option("--strategy", tan_strategy,
                      "how this switch, the job's root, picks among the candidates (default "
                      "fixed: the first)")
          ->check(CLI::IsMember({"fixed", "random", "least_load", "fewest_hops"}));
  CLI::Option* candidate =
      tan->add_option("--candidate", tan_candidates,
                      "a TAN the root may pick (port 47000, hops 0 by default); repeatable. One "
                      "with the default strategy: the management node's own pick")
          ->check(Syntax(ParseCandidate, "ADDR[:PORT][,hops=H]"))
          ->type_name("ADDR[:PORT][,hops=H]");
  tan->add_flag("--self", tan_self, "the root merges the late data itself")
      ->excludes(strategy, candidate);
  strategy->needs(candidate);
  CLI::Option* member =
      tan->add_option("--member", tan_member,
                      "the worker of the job here (its node id) that also runs the TAN: when it "
                      "is late, no bypass entry for it (it keeps its own data)")
          ->check(CLI::Range(0, 65534));
  tan->add_flag("--no-member", tan_no_member, "no worker here runs the TAN")->excludes(member);
  tan->callback([&] {
    target = ApiPath(routes::kJobTan, tan_job);
    print = PrintTan;
    json body = TanChoiceJson(tan_strategy, tan_candidates, tan_self);
    if (body.is_null()) body = json::object();
    if (tan_member) body["member"] = *tan_member;
    if (tan_no_member) body["member"] = nullptr;
    if (body.empty()) return;  // show
    method = "POST";
    request_body = body.dump();
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!job_body.is_null()) {
    const std::optional<uint64_t> key = common::ParseJobKey(o.job_key);
    if (!key) {
      std::cerr << "aggctl: --key must be a decimal number below 2^64 or 0x and 1..16 hex "
                   "digits, got '"
                << o.job_key << "'\n";
      return 2;
    }
    char hex[19];
    std::snprintf(hex, sizeof(hex), "0x%016llx", static_cast<unsigned long long>(*key));
    job_body["key"] = hex;
    request_body = job_body.dump();
  }
  const int rc = Run(o, method, target, request_body, print);
  if (rc == 0 && method == "DELETE" && !o.json) {
    if (jobs_unbind->parsed()) {
      std::cout << "unbound member " << unbind_node << " of job " << *o.job_id << '\n';
    } else {
      std::cout << "removed job " << *o.job_id << '\n';
    }
  }
  return rc;
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) {
  return aggswitch::tools::Main(argc, argv);
}
