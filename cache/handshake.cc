#include "cache/handshake.h"

#include <cstring>

#include "cache/external_store.h"
#include "cache/region.h"

namespace aggswitch::cache {

std::string BuildHello(const std::string& job) {
  HelloRequest req;
  req.job_len = static_cast<uint32_t>(job.size());
  std::string bytes(reinterpret_cast<const char*>(&req), sizeof(req));
  return bytes + job;
}

common::Result<std::string> ParseHello(const void* data, size_t length, bool rendezvous) {
  if (rendezvous) return common::InvalidArgument("a hello sent by rendezvous, not eagerly");
  HelloRequest req;
  if (length < sizeof(req)) {
    return common::InvalidArgument("a hello of " + std::to_string(length) + " bytes, shorter than its header");
  }
  std::memcpy(&req, data, sizeof(req));
  if (req.magic != HelloRequest::kMagic) return common::InvalidArgument("a hello without the cache's magic");
  if (req.job_len > kMaxJobName) {
    return common::InvalidArgument("a job name of " + std::to_string(req.job_len) + " bytes (at most " +
                                   std::to_string(kMaxJobName) + ")");
  }
  if (length != sizeof(req) + req.job_len) {
    return common::InvalidArgument("a hello of " + std::to_string(length) + " bytes for a job name of " +
                                   std::to_string(req.job_len));
  }
  return std::string(static_cast<const char*>(data) + sizeof(req), req.job_len);
}

std::string BuildHelloReply(const HelloReply& reply, const std::string& tail) {
  HelloReply r = reply;
  r.rkey_len = static_cast<uint32_t>(tail.size());
  std::string bytes(reinterpret_cast<const char*>(&r), sizeof(r));
  return bytes + tail;
}

common::Result<ParsedHelloReply> ParseHelloReply(const void* data, size_t length) {
  ParsedHelloReply p;
  if (length < sizeof(p.reply)) {
    return common::InvalidArgument("a reply of " + std::to_string(length) + " bytes, shorter than its header");
  }
  std::memcpy(&p.reply, data, sizeof(p.reply));
  const HelloReply& r = p.reply;
  if (r.rkey_len > kMaxReplyTail || length != sizeof(r) + r.rkey_len) {
    return common::InvalidArgument("a reply of " + std::to_string(length) + " bytes for a tail of " +
                                   std::to_string(r.rkey_len));
  }
  if (r.status != HelloReply::kAccepted && r.status != HelloReply::kRefused &&
      r.status != HelloReply::kBadRequest) {
    return common::InvalidArgument("a reply of status " + std::to_string(r.status));
  }
  if (r.status == HelloReply::kAccepted &&
      (r.rkey_len == 0 || r.region_size == 0 || r.region_base > UINT64_MAX - r.region_size)) {
    return common::InvalidArgument("an accepted reply without a key or a region");
  }
  p.tail.assign(static_cast<const char*>(data) + sizeof(r), r.rkey_len);
  return p;
}

std::optional<std::string> ParseFill(const void* data, size_t length, bool rendezvous) {
  if (rendezvous || length == 0 || length > ExternalStore::kMaxNameLength) return std::nullopt;
  std::string item(static_cast<const char*>(data), length);
  if (!ExternalStore::ValidName(item)) return std::nullopt;
  return item;
}

bool HolderInRegion(uint64_t addr, uint64_t length, uint64_t base, uint64_t size) {
  if (addr < base) return false;
  const uint64_t off = addr - base;  // the item's offset; its header is just before it
  return off >= sizeof(ItemHeader) && off <= size && length <= size - off;
}

}  // namespace aggswitch::cache
