#include "control/int_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include "common/udp_bind.h"
#include "telemetry/int_wire.h"

namespace aggswitch::control {
namespace {

constexpr auto kUtilizationPeriod = std::chrono::milliseconds(100);

}  // namespace

common::Result<std::unique_ptr<IntExporter>> IntExporter::Create(
    dataplane::Dataplane& dp, const config::TelemetryConfig& config) {
  if (dp.int_settings() == nullptr) {
    return common::FailedPrecondition("in-band telemetry is off: the config has no telemetry section");
  }
  if (!config.collector) {
    return common::FailedPrecondition("telemetry.collector is not configured: no reports to send");
  }
  ASSIGN_OR_RETURN(common::BoundUdp socket,
                   common::BindUdp(common::Ipv4Endpoint{}, "the telemetry report socket"));
  return std::unique_ptr<IntExporter>(new IntExporter(dp, config, socket.fd));
}

IntExporter::IntExporter(dataplane::Dataplane& dp, const config::TelemetryConfig& config, int fd)
    : dp_(dp),
      node_id_(config.node_id),
      collector_(*config.collector),
      fd_(fd),
      ns_per_cycle_(1e9 / static_cast<double>(dp.tsc_hz())),
      util_ppm_(dp.port_count(), 0),
      last_tx_bytes_(dp.port_count(), 0) {}

IntExporter::~IntExporter() { close(fd_); }

size_t IntExporter::Poll(std::chrono::steady_clock::time_point now) {
  if (now - last_refresh_ >= kUtilizationPeriod) RefreshUtilization(now);
  const size_t n = dp_.ProcessIntRecords([this](const dataplane::IntHopRecord& r) { Add(r); });
  SendBatch();
  return n;
}

void IntExporter::RefreshUtilization(std::chrono::steady_clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - last_refresh_).count();
  const bool first = last_refresh_ == std::chrono::steady_clock::time_point{};
  last_refresh_ = now;
  for (size_t p = 0; p < util_ppm_.size(); ++p) {
    const uint64_t bytes = dp_.GetPortTotals(p).tx_bytes;
    const uint64_t sent = bytes - last_tx_bytes_[p];
    last_tx_bytes_[p] = bytes;
    const uint32_t mbps = dp_.GetPortInfo(p).link_speed_mbps;
    if (first || mbps == 0 || seconds <= 0) {
      util_ppm_[p] = 0;
      continue;
    }
    const double capacity_bits = static_cast<double>(mbps) * 1e6 * seconds;
    const double share = static_cast<double>(sent) * 8 / capacity_bits;
    util_ppm_[p] = static_cast<uint32_t>(std::min(1.0, share) * 1e6);
  }
}

void IntExporter::Add(const dataplane::IntHopRecord& r) {
  if (n_batch_ == kBatch) SendBatch();
  telemetry::HopReport report;
  report.node_id = node_id_;
  report.sequence = sequence_++ & 0x3FFFFF;
  report.last_hop = r.last_hop != 0;
  report.instructions = r.instructions;
  report.hop.node_id = node_id_;
  report.hop.ingress_port = r.in_port;
  report.hop.egress_port = r.out_port;
  report.hop.hop_latency_ns =
      static_cast<uint32_t>(std::min(4294967294.0, static_cast<double>(r.latency_cycles) * ns_per_cycle_));
  report.hop.queue_occupancy = r.queue_occupancy & 0xFFFFFF;
  report.hop.tx_utilization = tx_utilization_ppm(r.out_port);
  report.source_node = r.source_node;
  report.path_seq = r.path_seq;
  report.hop_index = r.hop_index;
  report.inner = r.inner;
  report.has_inner = true;
  const size_t n = telemetry::BuildReport(report, buffers_[n_batch_], kReportMax);
  if (n == 0) {
    dp_.int_export().send_failed.Add(1);  // cannot happen: a report takes under 128 bytes
    return;
  }
  lengths_[n_batch_++] = n;
}

void IntExporter::SendBatch() {
  if (n_batch_ == 0) return;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(collector_.port);
  to.sin_addr.s_addr = htonl(collector_.ip.addr);
  iovec iov[kBatch];
  mmsghdr msgs[kBatch] = {};
  for (size_t i = 0; i < n_batch_; ++i) {
    iov[i] = {buffers_[i], lengths_[i]};
    msgs[i].msg_hdr.msg_name = &to;
    msgs[i].msg_hdr.msg_namelen = sizeof(to);
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  size_t sent = 0;
  while (sent < n_batch_) {
    const int n = sendmmsg(fd_, msgs + sent, static_cast<unsigned>(n_batch_ - sent), MSG_DONTWAIT);
    if (n <= 0) break;  // the socket refused the next one: the rest count as failed
    sent += static_cast<size_t>(n);
  }
  dp_.int_export().reports_sent.Add(sent);
  if (sent < n_batch_) dp_.int_export().send_failed.Add(n_batch_ - sent);
  n_batch_ = 0;
}

}  // namespace aggswitch::control
