// Job keys as people write them (config files, aggctl, agg-gen, agg-worker):
// an unsigned decimal integer below 2^64, or "0x" and 1..16 hex digits.
//
//   std::optional<uint64_t> key = common::ParseJobKey("0x5eed");   // 0x5eed
//   ASSIGN_OR_RETURN(uint64_t k, common::ParseJobKeyOption("--key", text));
//
// Thread safety: a pure function; any thread.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace aggswitch::common {

// What a parse failure should tell the user was expected.
inline constexpr char kJobKeyExpected[] =
    "a job key: an unsigned integer below 2^64 or a \"0x...\" hex string of 1..16 digits";

inline std::optional<uint64_t> ParseJobKey(std::string_view text) {
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const char* first = text.data() + (hex ? 2 : 0);
  const char* last = text.data() + text.size();
  uint64_t value = 0;
  const auto [next, ec] = std::from_chars(first, last, value, hex ? 16 : 10);
  if (text.empty() || first == last || ec != std::errc() || next != last ||
      (hex && last - first > 16)) {
    return std::nullopt;
  }
  return value;
}

// The same for a command-line option: InvalidArgument naming `option` (e.g.
// "--key"), what was expected and what was given.
inline Result<uint64_t> ParseJobKeyOption(std::string_view option, std::string_view text) {
  const std::optional<uint64_t> key = ParseJobKey(text);
  if (!key) {
    return InvalidArgument(std::string(option) + ": expected " + kJobKeyExpected + ", got \"" +
                           std::string(text) + "\"");
  }
  return *key;
}

}  // namespace aggswitch::common
