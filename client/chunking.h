// How the client cuts a vector into chunks, and which switch reduces it.
//
// Chunks: a vector of n elements travels as ChunkCount(n, E) contributions of
// E = ElementsPerChunk(dtype, mtu) elements, the last one shorter; chunk k
// holds elements [k * E, min(n, (k + 1) * E)) and gets the sequence number
// first_seq + k, where first_seq continues from the client's previous chunk.
//
// Switch choice (seed 001): with S switches configured, one allreduce goes to
// switch SwitchIndex(addr_low, S) = addr_low mod S (for S a power of two, the
// low log2(S) bits), and every contribution carries addr_low in its header.
// The seed takes addr_low from the buffer's start address, which must be the
// same on every rank; virtual addresses differ between processes, so the
// client uses a number every rank shares instead: by default the index of the
// call (the n-th allreduce of this client, 0-based; collectives are issued in
// the same order on every rank), or one the caller passes, such as a tensor's
// offset in a fused gradient buffer or its index in the model.
//
//   uint32_t e = ElementsPerChunk(DType::kFloat32, 1500);  // 356
//   uint64_t chunks = ChunkCount(n, e);
//   size_t switch_index = SwitchIndex(call_index, switches.size());
//
// Thread safety: constexpr functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "aggregator/types.h"
#include "aggregator/wire.h"

namespace aggswitch::client {

// IPv4 (20) and UDP (8) headers below the aggregation header.
inline constexpr uint32_t kIpv4UdpHeaderBytes = 28;
// The smallest and largest MTU the client accepts: one int32 element must fit,
// and 9600 is the largest port MTU aggswitch configures.
inline constexpr uint32_t kMinMtu = 128;
inline constexpr uint32_t kMaxMtu = 9600;
// elem_count is 16 bits on the wire.
inline constexpr uint32_t kMaxChunkElements = 0xFFFF;

// The UDP payload of a contribution of `elements` elements: header plus data.
constexpr uint32_t DatagramBytes(aggregator::DType dtype, uint32_t elements) {
  return static_cast<uint32_t>(sizeof(aggregator::AggHeader) +
                               elements * aggregator::ElementSize(dtype));
}

// Elements of `dtype` in one contribution that fits an IPv4 packet of `mtu`
// bytes, leaving room for a missing list of `reserve_ids` node ids (a
// switch's partial carries one on the way up, docs/stragglers.md):
// (mtu - 28 - 52 - 2 * reserve_ids) / size, at most kMaxChunkElements. With
// 1500 and no reserve: 355 int32 or float32, 710 float16 or bfloat16, 1420
// bool; with 32 ids reserved: 339, 678, 1356. 0 when not even one fits.
constexpr uint32_t ElementsPerChunk(aggregator::DType dtype, uint32_t mtu,
                                    uint32_t reserve_ids = 0) {
  const uint32_t overhead =
      kIpv4UdpHeaderBytes + static_cast<uint32_t>(sizeof(aggregator::AggHeader)) + 2 * reserve_ids;
  if (mtu <= overhead) return 0;
  const uint32_t n = (mtu - overhead) / static_cast<uint32_t>(aggregator::ElementSize(dtype));
  return n < kMaxChunkElements ? n : kMaxChunkElements;
}

// Chunks of `per_chunk` elements that hold `elements`. per_chunk > 0.
constexpr uint64_t ChunkCount(uint64_t elements, uint32_t per_chunk) {
  return (elements + per_chunk - 1) / per_chunk;
}

// Which of `n_switches` (> 0) reduces the allreduce that carries `addr_low`.
constexpr size_t SwitchIndex(uint32_t addr_low, size_t n_switches) {
  return addr_low % n_switches;
}

}  // namespace aggswitch::client
