// CRC-32C (Castagnoli) of a byte range: the data cache's end-to-end check of
// an item. The daemon stores it with the item and in its record; a loader
// recomputes it over the bytes it received before handing them out.
//
//   uint32_t c = Crc32c(data, len);            // whole buffer
//   c = Crc32cExtend(c, more, more_len);       // or piecewise, in order
//
// Uses the SSE4.2 crc32 instruction where the CPU has it (several GB/s), a
// table otherwise. Thread safety: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace aggswitch::cache {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32c(const void* data, size_t len) { return Crc32cExtend(0, data, len); }

}  // namespace aggswitch::cache
