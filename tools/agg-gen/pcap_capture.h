// --pcap-out: the frames agg-gen would send, written to a pcap file instead of
// a port, for replay with tcpreplay or Pktgen-DPDK. No EAL, no port.
//
// For chunk seq = 0 .. chunks-1, for every job, for every worker: that
// worker's contribution, carrying the ack watermark a worker has in the
// steady state of a window-W closed loop, max(0, seq + 1 - W); then, per job
// and worker, the final ACK with watermark `chunks`. That is
// chunks * jobs * workers + jobs * workers frames, 1 microsecond apart.
//
//   RETURN_IF_ERROR(WritePcapCapture(cfg, "agg.pcap", &frames_written));
//
// Thread safety: control-side code (file I/O); any one thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

// `cfg` must have passed ValidateGenConfig and have chunks > 0.
common::Status WritePcapCapture(const GenConfig& cfg, const std::string& path,
                                uint64_t* frames_written);

}  // namespace aggswitch::tools
