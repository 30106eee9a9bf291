#include "cache/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace aggswitch::cache {
namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t ExtendTable(uint32_t crc, const uint8_t* p, size_t len) {
  for (size_t i = 0; i < len; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p,
                                                       size_t len) {
  uint64_t c = crc;
  while (len >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (len-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  crc = kHaveSse42 ? ExtendSse42(crc, p, len) : ExtendTable(crc, p, len);
  return ~crc;
}

}  // namespace aggswitch::cache
