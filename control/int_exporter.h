// The switch's side of in-band telemetry on the control thread: turns the
// hop records the workers queue (dataplane/int_stage.h) into Telemetry
// Reports (telemetry/int_wire.h) and sends them to the collector over UDP,
// one report per record, up to 64 in one sendmmsg. It also measures each port's TX utilisation, which
// the reports of the bandwidth instruction set carry: the port's transmitted
// bytes over the last 100 ms against its link speed.
//
//   ASSIGN_OR_RETURN(auto exporter, IntExporter::Create(*dp, cfg.telemetry));
//   ... each control loop pass: exporter->Poll(now);
//
// Counts what it sent and what the socket refused in Dataplane::int_export().
//
// Thread safety: Create and Poll on the control thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {

class IntExporter {
 public:
  // Opens the socket toward telemetry.collector. FailedPrecondition when
  // the dataplane runs no telemetry or no collector is configured. [control]
  static common::Result<std::unique_ptr<IntExporter>> Create(dataplane::Dataplane& dp,
                                                            const config::TelemetryConfig& config);
  ~IntExporter();
  IntExporter(const IntExporter&) = delete;
  IntExporter& operator=(const IntExporter&) = delete;

  // Sends a report for every record queued since the last call, and
  // refreshes the utilisation every 100 ms. Returns the records handled.
  // [control]
  size_t Poll(std::chrono::steady_clock::time_point now);

  // TX utilisation of port `p` in parts per million, as the last refresh
  // measured it (0 when its link speed is unknown). [control]
  uint32_t tx_utilization_ppm(size_t p) const { return p < util_ppm_.size() ? util_ppm_[p] : 0; }

 private:
  IntExporter(dataplane::Dataplane& dp, const config::TelemetryConfig& config, int fd);
  void RefreshUtilization(std::chrono::steady_clock::time_point now);
  // Builds the report of `r` into the next free batch buffer; a full batch is sent first.
  void Add(const dataplane::IntHopRecord& r);
  // Sends the batch: one sendmmsg for up to kBatch reports.
  void SendBatch();

  static constexpr size_t kBatch = 64;
  static constexpr size_t kReportMax = 256;

  dataplane::Dataplane& dp_;
  const uint32_t node_id_;
  const common::Ipv4Endpoint collector_;
  const int fd_;
  uint32_t sequence_ = 0;  // 22 bits on the wire
  double ns_per_cycle_ = 0;
  std::vector<uint32_t> util_ppm_;
  std::vector<uint64_t> last_tx_bytes_;
  std::chrono::steady_clock::time_point last_refresh_{};
  uint8_t buffers_[kBatch][kReportMax];
  size_t lengths_[kBatch] = {};
  size_t n_batch_ = 0;
};

}  // namespace aggswitch::control
