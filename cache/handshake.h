// The cache's handshake messages as bytes (ucx_transport.h lists them): the
// loader's hello, the daemon's reply, and a read-through fill request, each
// built and parsed here, apart from UCX, so that every byte a peer sends
// goes through one checked parser (and tests/fuzz/cache_fuzz.cc feeds
// them). Also the check every holder address passes before a read: that
// the item, its header included, lies inside the region the holder's
// daemon announced.
//
//   const std::string hello = BuildHello("train");
//   ASSIGN_OR_RETURN(std::string job, ParseHello(hello.data(), hello.size(), false));
//   if (!HolderInRegion(h.addr, rec.length, base, size)) ...  // a forged or bent record
//
// Thread safety: pure functions [any].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cache/ucx_transport.h"
#include "common/status.h"

namespace aggswitch::cache {

// The longest job name a hello carries.
inline constexpr uint32_t kMaxJobName = 256;
// The longest packed remote key (or refusal text) a reply carries: UCX's
// keys are a few hundred bytes.
inline constexpr uint32_t kMaxReplyTail = 16 * 1024;

// HelloRequest and the job name.
std::string BuildHello(const std::string& job);
// The job name of a hello; an error names what is malformed (the magic,
// the length, a name too long). A hello is sent eagerly: with `rendezvous`
// (UCP_AM_RECV_ATTR_FLAG_RNDV) `data` is UCX's descriptor, not the bytes,
// and is not read.
common::Result<std::string> ParseHello(const void* data, size_t length, bool rendezvous);

// HelloReply and its tail: the packed key when accepted, else the reason.
std::string BuildHelloReply(const HelloReply& reply, const std::string& tail);
struct ParsedHelloReply {
  HelloReply reply;
  std::string tail;
};
// A daemon's reply: the length must be the header's and its tail's, the
// status one of HelloReply's, and an accepted reply's region non-empty and
// inside the address space. An error names what is wrong.
common::Result<ParsedHelloReply> ParseHelloReply(const void* data, size_t length);

// The item name of a fill request, when it is one a store may hold
// (ExternalStore::ValidName); nullopt otherwise. `rendezvous`: UCX delivered
// a descriptor in place of the bytes, which no real request needs.
std::optional<std::string> ParseFill(const void* data, size_t length, bool rendezvous);

// Whether an item of `length` bytes at `addr`, with its ItemHeader just
// before it, lies inside the region [base, base + size). Overflow-safe.
bool HolderInRegion(uint64_t addr, uint64_t length, uint64_t base, uint64_t size);

}  // namespace aggswitch::cache
