#include "tools/agg-gen/pcap_writer.h"

#include <cerrno>
#include <cstring>

namespace aggswitch::tools {

namespace {

struct [[gnu::packed]] PcapGlobalHeader {
  uint32_t magic = kPcapMagicMicros;
  uint16_t version_major = 2;
  uint16_t version_minor = 4;
  int32_t thiszone = 0;  // timestamps are UTC
  uint32_t sigfigs = 0;
  uint32_t snaplen = kPcapSnapLen;
  uint32_t linktype = kPcapLinkTypeEthernet;
};
static_assert(sizeof(PcapGlobalHeader) == 24);

struct [[gnu::packed]] PcapRecordHeader {
  uint32_t ts_sec;
  uint32_t ts_usec;
  uint32_t incl_len;  // bytes stored
  uint32_t orig_len;  // bytes on the wire
};
static_assert(sizeof(PcapRecordHeader) == 16);

}  // namespace

common::Result<PcapWriter> PcapWriter::Create(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return common::Unavailable("cannot create " + path + ": " + std::strerror(errno));
  }
  PcapWriter writer(path, f);
  const PcapGlobalHeader header;
  common::Status status = writer.Put(&header, sizeof(header));
  if (!status.ok()) return status;
  return writer;
}

common::Status PcapWriter::Put(const void* data, size_t len) {
  if (std::fwrite(data, 1, len, file_.get()) != len) {
    return common::Unavailable("cannot write " + path_ + ": " + std::strerror(errno));
  }
  return common::Status::Ok();
}

common::Status PcapWriter::Write(const uint8_t* frame, uint32_t len, uint64_t timestamp_us) {
  const uint32_t stored = len < kPcapSnapLen ? len : kPcapSnapLen;
  const PcapRecordHeader record{static_cast<uint32_t>(timestamp_us / 1000000),
                                static_cast<uint32_t>(timestamp_us % 1000000), stored, len};
  RETURN_IF_ERROR(Put(&record, sizeof(record)));
  RETURN_IF_ERROR(Put(frame, stored));
  ++frames_;
  return common::Status::Ok();
}

common::Status PcapWriter::Close() {
  FILE* f = file_.release();
  if (f == nullptr) return common::Status::Ok();
  if (std::fclose(f) != 0) {
    return common::Unavailable("cannot write " + path_ + ": " + std::strerror(errno));
  }
  return common::Status::Ok();
}

}  // namespace aggswitch::tools
