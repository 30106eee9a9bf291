// What the libFuzzer harnesses of tests/fuzz share: a check that turns a
// broken invariant into a finding, and a reader for the harnesses whose input
// is more than one buffer.
//
// A harness asserts properties, not only the absence of crashes: when one does
// not hold, FUZZ_CHECK prints the condition and traps, and libFuzzer saves the
// input as a crash like any other (tests/fuzz/README.md).
//
//   FUZZ_CHECK(pkt.payload + pkt.payload_len <= data + size);
//
//   FuzzReader in(data, size);
//   const uint8_t mode = in.Byte();
//   while (!in.empty()) { std::span<const uint8_t> record = in.Record(); ... }
//
// Thread safety: FUZZ_CHECK [any]; FuzzReader is a plain value [one thread].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      __builtin_trap();                                                                 \
    }                                                                                   \
  } while (0)

namespace aggswitch::fuzz {

// Reads an input front to back. Running out is not an error: a read past the
// end yields zeros or a short record, so every byte string is a valid input.
class FuzzReader {
 public:
  FuzzReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return at_ >= size_; }

  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t U16() {  // big-endian, like the wire
    const uint16_t hi = Byte();
    return static_cast<uint16_t>(hi << 8 | Byte());
  }

  // A record: a big-endian 16-bit length, then that many bytes (fewer when
  // the input ends first).
  std::span<const uint8_t> Record() {
    const size_t want = U16();
    const size_t n = want < size_ - at_ ? want : size_ - at_;
    std::span<const uint8_t> r(data_ + at_, n);
    at_ += n;
    return r;
  }

  // Everything not read yet.
  std::span<const uint8_t> Rest() {
    std::span<const uint8_t> r(data_ + at_, size_ - at_);
    at_ = size_;
    return r;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace aggswitch::fuzz
