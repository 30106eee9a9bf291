#include "tools/agg-gen/chunk_window.h"

#include <bit>

namespace aggswitch::tools {

void ChunkWindow::Init(uint32_t window) {
  const uint32_t capacity = std::bit_ceil(window);
  entries_ = std::make_unique<Entry[]>(capacity);
  mask_ = capacity - 1;
  ack_ = 0;
  next_ = 0;
}

uint32_t ChunkWindow::InFlightUnanswered() const {
  uint32_t n = 0;
  for (uint32_t seq = ack_; seq != next_; ++seq) n += entries_[seq & mask_].answered ? 0 : 1;
  return n;
}

}  // namespace aggswitch::tools
