#include "dataplane/hold_buffers.h"

#include <rte_memcpy.h>

namespace aggswitch::dataplane {

void* HoldBuffers::Take(const aggregator::Job& job, const uint8_t* payload, uint32_t len,
                        Refusal* why) {
  const bool in_band = job.in_band();
  if (in_band && in_band_held_ >= in_band_budget_) {
    *why = Refusal::kInBandShare;
    return nullptr;
  }
  void* buf = nullptr;
  if (len > max_payload_ || rte_mempool_get(pool_, &buf) != 0) {
    *why = Refusal::kPoolEmpty;
    return nullptr;
  }
  static_cast<Header*>(buf)->in_band = in_band;
  rte_memcpy(static_cast<uint8_t*>(buf) + kHeaderBytes, payload, len);
  if (in_band) ++in_band_held_;
  *why = Refusal::kNone;
  return buf;
}

void HoldBuffers::Give(void* buf) {
  if (buf == nullptr) return;
  if (static_cast<const Header*>(buf)->in_band && in_band_held_ > 0) --in_band_held_;
  rte_mempool_put(pool_, buf);
}

}  // namespace aggswitch::dataplane
