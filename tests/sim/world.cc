#include "tests/sim/world.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "aggregator/wire.h"
#include "common/net_addr.h"
#include "dataplane/packet.h"

namespace aggswitch::sim {

Link::Link(World& world, FrameSink* to, LinkFaults faults, uint64_t seed, uint64_t id)
    : world_(world), to_(to), faults_(std::move(faults)), rng_(seed), id_(id) {}

void Link::Send(const uint8_t* data, size_t len) {
  ++counters_.sent;
  const uint64_t now = world_.now();
  for (const LinkFaults::Window& w : faults_.down) {
    if (now >= w.from_ns && now < w.until_ns) {
      ++counters_.lost;
      world_.TraceLost(id_, data, len);
      return;
    }
  }
  if (faults_.loss > 0 && rng_.Chance(faults_.loss)) {
    ++counters_.lost;
    world_.TraceLost(id_, data, len);
    return;
  }
  const int copies = faults_.duplicate > 0 && rng_.Chance(faults_.duplicate) ? 2 : 1;
  if (copies == 2) ++counters_.duplicated;
  for (int c = 0; c < copies; ++c) {
    uint64_t at = now + faults_.delay_ns;
    if (faults_.reorder > 0 && rng_.Chance(faults_.reorder)) {
      at += 1 + rng_.Below(faults_.reorder_ns);
      ++counters_.reordered;
    } else {
      // In order behind every frame sent before it.
      at = std::max(at, last_arrival_);
      last_arrival_ = at;
    }
    Frame frame(data, data + len);
    world_.At(at, [this, frame = std::move(frame)]() mutable {
      ++counters_.delivered;
      world_.Trace(id_, frame.data(), frame.size());
      to_->Receive(std::move(frame));
    });
  }
}

void World::At(uint64_t at_ns, std::function<void()> fn) {
  queue_.push(Event{std::max(at_ns, now()), order_++, std::move(fn)});
}

bool World::Run(uint64_t limit_ns, const std::function<bool()>& done) {
  while (!queue_.empty()) {
    if (queue_.top().at > limit_ns) return false;
    Event e = std::move(const_cast<Event&>(queue_.top()));
    queue_.pop();
    clock_.AdvanceTo(e.at);
    ++events_;
    e.fn();
    if (done()) return true;
  }
  return done();
}

namespace {

// One line of a frame's headers: Ethernet, IPv4/UDP, the aggregation header.
void PrintFrame(uint64_t now, uint64_t link, const uint8_t* d, size_t len, const char* note = "") {
  std::fprintf(stderr, "%10.3f ms link %3" PRIu64 ":%s ", static_cast<double>(now - SimClock::kEpochNs) / 1e6,
               link, note);
  if (len < 14) {
    std::fprintf(stderr, "runt\n");
    return;
  }
  const uint16_t type = static_cast<uint16_t>(d[12] << 8 | d[13]);
  if (type == 0x0806) {
    std::fprintf(stderr, "arp %s\n", d[21] == 1 ? "request" : "reply");
    return;
  }
  dataplane::UdpInfo udp;
  if (dataplane::ParseIpv4Udp(d, static_cast<uint32_t>(len), 14, &udp) != dataplane::UdpParse::kOk) {
    std::fprintf(stderr, "type %04x, %zu bytes\n", type, len);
    return;
  }
  std::fprintf(stderr, "%s:%u > %s:%u ", common::Ipv4Addr{udp.src_ip}.ToString().c_str(), udp.src_port,
               common::Ipv4Addr{udp.dst_ip}.ToString().c_str(), udp.dst_port);
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(d + udp.payload_offset, udp.payload_len, &pkt) != aggregator::WireError::kOk) {
    std::fprintf(stderr, "%u bytes\n", udp.payload_len);
    return;
  }
  const aggregator::AggHeader& h = *pkt.header;
  std::fprintf(stderr, "op %u job %u seq %u node %u flags %04x aux %u n %u missing %u ack %u run %08x",
               h.opcode, h.job_id.host(), h.seq.host(), h.node_id.host(), h.flags.host(), h.aux.host(),
               h.elem_count.host(), h.missing_count, h.ack_watermark.host(), h.incarnation.host());
  // The missing ids, as far as the datagram holds them.
  for (uint8_t i = 0; pkt.missing != nullptr && i < h.missing_count; ++i) {
    std::fprintf(stderr, "%c%u", i == 0 ? ' ' : ',', pkt.missing[2 * i] << 8 | pkt.missing[2 * i + 1]);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

void World::TraceLost(uint64_t what, const uint8_t* data, size_t len) {
  if (print_) PrintFrame(now(), what, data, len, " LOST");
}

void World::Trace(uint64_t what, const uint8_t* data, size_t len) {
  if (print_) PrintFrame(now(), what, data, len);
  // FNV-1a over (time, what, bytes).
  auto fold = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      trace_ ^= (v >> (8 * i)) & 0xff;
      trace_ *= 0x100000001b3ULL;
    }
  };
  fold(now());
  fold(what);
  for (size_t i = 0; i < len; ++i) {
    trace_ ^= data[i];
    trace_ *= 0x100000001b3ULL;
  }
}

}  // namespace aggswitch::sim
