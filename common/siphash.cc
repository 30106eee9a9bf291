#include "common/siphash.h"

#include <sys/random.h>

#include <charconv>
#include <cstring>

namespace aggswitch::common {
namespace {

constexpr uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct State {
  uint64_t v0, v1, v2, v3;

  void Round() {
    v0 += v1;
    v1 = Rotl(v1, 13);
    v1 ^= v0;
    v0 = Rotl(v0, 32);
    v2 += v3;
    v3 = Rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = Rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = Rotl(v1, 17);
    v1 ^= v2;
    v2 = Rotl(v2, 32);
  }
  void Absorb(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
};

uint64_t LoadLe64(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

std::optional<SipKey> SipKey::Random() {
  uint64_t words[2];
  if (getrandom(words, sizeof(words), 0) != static_cast<ssize_t>(sizeof(words))) return std::nullopt;
  return SipKey{words[0], words[1]};
}

std::optional<SipKey> SipKey::Parse(std::string_view text) {
  if (text.size() != 34 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return std::nullopt;
  SipKey key;
  for (auto [part, out] : {std::pair{text.substr(2, 16), &key.k0}, std::pair{text.substr(18, 16), &key.k1}}) {
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), *out, 16);
    if (ec != std::errc() || end != part.data() + part.size()) return std::nullopt;
  }
  return key;
}

uint64_t SipHash24(const SipKey& key, const void* data, size_t len) {
  const auto* in = static_cast<const uint8_t*>(data);
  State s{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL,
          key.k0 ^ 0x6c7967656e657261ULL, key.k1 ^ 0x7465646279746573ULL};
  const size_t whole = len & ~size_t{7};
  for (size_t i = 0; i < whole; i += 8) s.Absorb(LoadLe64(in + i, 8));
  s.Absorb((uint64_t{len & 0xff} << 56) | LoadLe64(in + whole, len - whole));
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace aggswitch::common
