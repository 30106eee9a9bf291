#include "tools/agg-gen/pcap_capture.h"

#include <chrono>
#include <vector>

#include "tools/agg-gen/frames.h"
#include "tools/agg-gen/pcap_writer.h"

namespace aggswitch::tools {

common::Status WritePcapCapture(const GenConfig& cfg, const std::string& path,
                                uint64_t* frames_written) {
  if (cfg.chunks == 0) return common::InvalidArgument("--pcap-out needs --chunks");
  const FrameFactory frames(cfg);
  ASSIGN_OR_RETURN(PcapWriter pcap, PcapWriter::Create(path));
  std::vector<uint8_t> buf(frames.contribution_len());
  uint64_t ts = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  for (uint32_t seq = 0; seq < cfg.chunks; ++seq) {
    const uint32_t ack = seq + 1 > cfg.window ? seq + 1 - cfg.window : 0;
    for (uint32_t job = 0; job < cfg.jobs; ++job) {
      for (uint16_t w = 0; w < cfg.workers; ++w) {
        frames.WriteContribution(job, w, seq, ack, false, buf.data());
        RETURN_IF_ERROR(pcap.Write(buf.data(), frames.contribution_len(), ts++));
      }
    }
  }
  for (uint32_t job = 0; job < cfg.jobs; ++job) {
    for (uint16_t w = 0; w < cfg.workers; ++w) {
      frames.WriteAck(job, w, cfg.chunks, buf.data());
      RETURN_IF_ERROR(pcap.Write(buf.data(), frames.ack_len(), ts++));
    }
  }
  *frames_written = pcap.frames();
  return pcap.Close();
}

}  // namespace aggswitch::tools
