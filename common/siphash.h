// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash, the keyed
// PRF behind the switch's slot placement (aggregator/slot_placement.h). With
// the key secret, nobody can tell where a job's chunks land from its id.
//
//   const SipKey key = SipKey::Random();            // or from the config
//   uint64_t h = SipHash24(key, &job_id, sizeof(job_id));
//
// Thread safety: pure functions on the caller's bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace aggswitch::common {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;

  // 128 fresh bits from the kernel (getrandom); nullopt when it fails.
  static std::optional<SipKey> Random();
  // "0x" and 32 hex digits (k0 then k1, most significant first); nullopt
  // for anything else.
  static std::optional<SipKey> Parse(std::string_view text);

  friend bool operator==(const SipKey&, const SipKey&) = default;
};

// The 64-bit SipHash-2-4 of `len` bytes at `data` under `key`, as the
// reference implementation computes it (the key's 16 bytes are k0 then k1,
// little-endian). [any]
uint64_t SipHash24(const SipKey& key, const void* data, size_t len);

}  // namespace aggswitch::common
