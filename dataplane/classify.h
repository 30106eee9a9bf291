// The first stage of every burst: parses each frame's Ethernet header and
// 802.1Q tag, maps it to its VLAN, drops (and counts) what no port may carry
// or what impersonates the switch, and sorts the rest into the vectors the
// next stages take: aggregation datagrams, and everything else for L2.
//
//   Classifier classify(plan, {address, udp_port, result_src_ip}, stats, tx);
//   Burst burst;
//   classify.Sort(in_port, pkts, n, &burst);
//   aggregation.Process(in_port, burst.agg);  l2.Process(in_port, burst.l2, tick);
//
// Thread safety: one Classifier per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

#include "dataplane/counters.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/int_stage.h"
#include "dataplane/tx_buffers.h"

namespace aggswitch::dataplane {

// What classification learned of a frame.
struct FrameMeta {
  uint16_t vlan;      // the VLAN the frame belongs to
  bool has_tag;       // it arrived with an 802.1Q tag
  uint8_t l3_offset;  // of the header behind Ethernet and the tag
};

// Frames for the L2 stage, with their MAC table keys.
struct L2Vector {
  rte_mbuf* m[kBurstSize];
  FrameMeta meta[kBurstSize];
  uint64_t src[kBurstSize];  // MacKey(vlan, source MAC)
  uint64_t dst[kBurstSize];  // MacKey(vlan, destination MAC)
  uint16_t n = 0;
};

// Aggregation datagrams (by their IPv4 destination and UDP port; the
// aggregation stage checks the rest).
struct AggVector {
  rte_mbuf* m[kBurstSize];
  FrameMeta meta[kBurstSize];
  uint16_t n = 0;
};

struct Burst {
  L2Vector l2;
  AggVector agg;
};

class Classifier {
 public:
  // What makes a frame an aggregation datagram; enabled == false: none is.
  struct Aggregation {
    bool enabled = false;
    uint32_t address = 0;        // aggregation IPv4 address (host order); 0: the UDP port alone
    uint16_t udp_port = 0;
    uint32_t result_src_ip = 0;  // what the switch sends from: nobody else may
  };

  Classifier(const ForwardingPlan& plan, const Aggregation& agg, LcoreStats& stats, TxBuffers& tx)
      : plan_(plan), agg_(agg), stats_(stats), tx_(tx) {}

  // Counts frames [0, n) received on `in_port` and sorts them into `out`
  // (whose vectors must be empty), dropping what fails a check.
  void Sort(uint16_t in_port, rte_mbuf* const* pkts, uint16_t n, Burst* out);

  // In-band telemetry: the frames bound for L2 of a burst `stage` looks at
  // pass through it (IntStage::OnFrame); the caller calls its BeginBurst.
  // Null: none.
  void set_int(IntStage* stage) { int_ = stage; }

  // What an IPv4 frame is to the switch. [any]
  enum class Ipv4Class : uint8_t { kOther, kAggregation, kSpoofed };
  Ipv4Class ClassifyIpv4(const uint8_t* data, uint32_t len, uint32_t l3_offset) const;

 private:
  const ForwardingPlan& plan_;
  const Aggregation agg_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  IntStage* int_ = nullptr;
};

}  // namespace aggswitch::dataplane
