// Typed big-endian (network byte order) integers for packed wire structs, so a
// field in network order can never be mixed up with a host-order integer.
//
//   struct [[gnu::packed]] Hdr { be16_t len; be32_t id; };
//   hdr.len = be16_t::FromHost(64);   uint32_t id = hdr.id.host();
//
// Thread safety: value types; any thread.
#pragma once

#include <cstdint>

namespace aggswitch::common {

// A 16/32/64-bit field stored in network byte order.
template <typename T>
class [[gnu::packed]] BigEndian {
 public:
  constexpr BigEndian() = default;
  static constexpr BigEndian FromHost(T v) { return BigEndian(Swap(v)); }
  static constexpr BigEndian FromRaw(T raw) { return BigEndian(raw); }
  constexpr T host() const { return Swap(raw_); }
  constexpr T raw() const { return raw_; }
  constexpr bool operator==(const BigEndian& o) const { return raw_ == o.raw_; }
  constexpr bool operator!=(const BigEndian& o) const { return raw_ != o.raw_; }

 private:
  constexpr explicit BigEndian(T raw) : raw_(raw) {}
  static constexpr T Swap(T v) {
    if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
    else if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
    else return static_cast<T>(__builtin_bswap64(v));
  }
  T raw_ = 0;
};
using be16_t = BigEndian<uint16_t>;
using be32_t = BigEndian<uint32_t>;
using be64_t = BigEndian<uint64_t>;
static_assert(sizeof(be16_t) == 2 && sizeof(be32_t) == 4 && sizeof(be64_t) == 8);

}  // namespace aggswitch::common
