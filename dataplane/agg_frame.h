// The vector element of the aggregation path's nodes: a datagram that passed
// its checks (AggregationStage::Check), with what the checks found out about
// it. Each node after the checks takes these, as VPP's nodes take buffer
// indices with their opaque metadata.
//
// Thread safety: a plain value; each lives on one worker's stack.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/wire.h"
#include "dataplane/classify.h"

namespace aggswitch::dataplane {

struct AggFrame {
  // Which of its chunk's possible slots a datagram is bound for.
  enum class Where : uint8_t {
    kHome,   // the chunk's home slot (Job::placement())
    kMoved,  // the chunk's slot in its job's moved partition
    kSpare,  // a spare slot
  };

  rte_mbuf* m;
  const aggregator::Job* job;
  aggregator::AggPacket pkt;
  uint32_t header_offset;
  uint32_t slot;  // global slot index
  Where where;
  // Sent to a spare slot or the moved partition by the switch (the
  // relocation map, the control thread, the home slot's owner), so it may
  // take the slot; a member's slot hint may not.
  bool claim;
  int member;        // local member index; -1 for a RESULT from above, or the main server
  bool main_server;  // a FETCH or ACK from the job's main server
  FrameMeta meta;
  uint16_t in_port;
};

}  // namespace aggswitch::dataplane
