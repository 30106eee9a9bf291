// A classic libpcap capture file writer (the format tcpdump, Wireshark,
// tcpreplay and Pktgen-DPDK read): a 24-byte global header, then a 16-byte
// record header and the bytes of each frame, all in host byte order, with
// microsecond timestamps and link type Ethernet. No libpcap needed.
//
//   ASSIGN_OR_RETURN(PcapWriter pcap, PcapWriter::Create("out.pcap"));
//   RETURN_IF_ERROR(pcap.Write(frame, len, timestamp_us));
//   RETURN_IF_ERROR(pcap.Close());
//
// Thread safety: one thread per writer. Control-side code: it does file I/O.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/status.h"

namespace aggswitch::tools {

inline constexpr uint32_t kPcapMagicMicros = 0xA1B2C3D4;
inline constexpr uint32_t kPcapLinkTypeEthernet = 1;
inline constexpr uint32_t kPcapSnapLen = 65535;

class PcapWriter {
 public:
  // Creates (truncates) `path` and writes the global header.
  static common::Result<PcapWriter> Create(const std::string& path);

  // Appends one frame captured at `timestamp_us` (microseconds since the epoch).
  common::Status Write(const uint8_t* frame, uint32_t len, uint64_t timestamp_us);

  // Flushes and closes the file; reports a failed write the buffering hid.
  common::Status Close();

  uint64_t frames() const { return frames_; }

 private:
  struct FileCloser {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  PcapWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  common::Status Put(const void* data, size_t len);

  std::string path_;
  std::unique_ptr<FILE, FileCloser> file_;
  uint64_t frames_ = 0;
};

}  // namespace aggswitch::tools
