#include "tests/sim/host.h"

#include <arpa/inet.h>

#include <cstring>
#include <utility>

#include "dataplane/net_headers.h"
#include "dataplane/packet.h"
#include "dataplane/udp_headers.h"
#include "tests/sim/fiber.h"

namespace aggswitch::sim {

using dataplane::ArpHdr;
using dataplane::EtherHdr;

Host::Host(World& world, std::string name, common::MacAddr mac, uint32_t ip)
    : world_(world), name_(std::move(name)), mac_(mac), ip_(ip) {}

uint16_t Host::Bind(uint16_t port, Deliver deliver) {
  if (port == 0) {
    // The kernel's way: the next free port of the ephemeral range, so that
    // a restarted process does not get its predecessor's.
    for (int i = 0; i < 20000 && sockets_.count(next_ephemeral_) != 0; ++i) {
      next_ephemeral_ = next_ephemeral_ == 59999 ? 40000 : next_ephemeral_ + 1;
    }
    port = next_ephemeral_;
    next_ephemeral_ = next_ephemeral_ == 59999 ? 40000 : next_ephemeral_ + 1;
  }
  if (!sockets_.emplace(port, std::move(deliver)).second) return 0;
  return port;
}

void Host::Unbind(uint16_t port) { sockets_.erase(port); }

bool Host::Send(uint16_t src_port, uint32_t dst_ip, uint16_t dst_port, const uint8_t* data,
                size_t len) {
  const auto n = neighbors_.find(dst_ip);
  if (n == neighbors_.end() || up_ == nullptr) {
    ++no_neighbor_;
    return false;
  }
  Frame frame(46 + len);
  const uint32_t hdr = dataplane::WriteUdpHeaders(frame.data(), n->second.bytes.data(), mac_.bytes.data(),
                                                  0, ip_, dst_ip, src_port, dst_port, ip_id_++,
                                                  static_cast<uint32_t>(len));
  std::memcpy(frame.data() + hdr, data, len);
  frame.resize(hdr + len);
  if (frame.size() < dataplane::kMinFrameLen) frame.resize(dataplane::kMinFrameLen, 0);
  up_->Send(frame.data(), frame.size());
  return true;
}

void Host::Receive(Frame frame) {
  if (frame.size() < sizeof(EtherHdr)) return;
  const auto* eth = reinterpret_cast<const EtherHdr*>(frame.data());
  const bool broadcast = std::all_of(eth->dst, eth->dst + 6, [](uint8_t b) { return b == 0xff; });
  if (!broadcast && std::memcmp(eth->dst, mac_.bytes.data(), 6) != 0) return;
  if (eth->ether_type == dataplane::kEtherTypeArp) {
    if (frame.size() < sizeof(EtherHdr) + sizeof(ArpHdr) || up_ == nullptr) return;
    const auto* arp = reinterpret_cast<const ArpHdr*>(frame.data() + sizeof(EtherHdr));
    if (arp->oper != dataplane::kArpOpRequest || arp->tpa.host() != ip_) return;
    Frame reply(sizeof(EtherHdr) + sizeof(ArpHdr));
    auto* reth = reinterpret_cast<EtherHdr*>(reply.data());
    std::memcpy(reth->dst, arp->sha, 6);
    std::memcpy(reth->src, mac_.bytes.data(), 6);
    reth->ether_type = dataplane::kEtherTypeArp;
    auto* r = reinterpret_cast<ArpHdr*>(reply.data() + sizeof(EtherHdr));
    *r = *arp;
    r->oper = dataplane::kArpOpReply;
    std::memcpy(r->tha, arp->sha, 6);
    r->tpa = arp->spa;
    std::memcpy(r->sha, mac_.bytes.data(), 6);
    r->spa = common::be32_t::FromHost(ip_);
    reply.resize(dataplane::kMinFrameLen, 0);
    up_->Send(reply.data(), reply.size());
    return;
  }
  dataplane::UdpInfo udp;
  if (dataplane::ParseIpv4Udp(frame.data(), static_cast<uint32_t>(frame.size()), sizeof(EtherHdr), &udp) !=
          dataplane::UdpParse::kOk ||
      udp.dst_ip != ip_) {
    return;
  }
  const auto s = sockets_.find(udp.dst_port);
  if (s == sockets_.end()) {
    ++unbound_drops_;
    return;
  }
  // The callback may unbind (and so destroy) itself: call a copy.
  const Deliver deliver = s->second;
  deliver(frame.data() + udp.payload_offset, udp.payload_len, udp.src_ip, udp.src_port);
}

SimTransport::SimTransport(World& world, Host& host, uint16_t port, uint32_t send_buffers,
                           uint32_t mtu, std::function<void()> wake)
    : world_(world), host_(host), wake_(std::move(wake)) {
  buffers_.assign(send_buffers, std::vector<uint8_t>(mtu));
  port_ = host_.Bind(port, [this](const uint8_t* data, size_t len, uint32_t ip, uint16_t p) {
    OnDatagram(data, len, ip, p);
  });
}

SimTransport::~SimTransport() {
  *alive_ = false;
  if (!killed_ && port_ != 0) host_.Unbind(port_);
}

void SimTransport::Kill() {
  if (killed_) return;
  killed_ = true;
  if (port_ != 0) host_.Unbind(port_);
  queue_.clear();
  if (waiting_) wake_();
}

void SimTransport::OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port) {
  if (killed_) return;
  Datagram d;
  d.bytes.assign(data, data + len);
  d.from.sin_family = AF_INET;
  d.from.sin_addr.s_addr = htonl(src_ip);
  d.from.sin_port = htons(src_port);
  queue_.push_back(std::move(d));
  if (waiting_) wake_();
}

common::Result<uint32_t> SimTransport::Send(const client::internal::OutDatagram* datagrams,
                                            uint32_t n) {
  if (killed_) return common::Unavailable("the process was killed");
  for (uint32_t i = 0; i < n; ++i) {
    const sockaddr_in& to = *datagrams[i].to;
    if (tap_) tap_(datagrams[i].data, datagrams[i].length);
    (void)host_.Send(port_, ntohl(to.sin_addr.s_addr), ntohs(to.sin_port), datagrams[i].data,
                     datagrams[i].length);
  }
  return n;
}

common::Result<std::span<const client::internal::InDatagram>> SimTransport::Receive() {
  if (killed_) return common::Unavailable("the process was killed");
  batch_.clear();
  in_.clear();
  while (!queue_.empty() && batch_.size() < kBatch) {
    batch_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  for (const Datagram& d : batch_) {
    in_.push_back(client::internal::InDatagram{d.bytes.data(), static_cast<uint32_t>(d.bytes.size()), d.from});
  }
  return std::span<const client::internal::InDatagram>(in_);
}

void SimTransport::Block(uint64_t deadline_ns) {
  const uint64_t token = ++wait_token_;
  waiting_ = true;
  if (deadline_ns != UINT64_MAX) {
    world_.At(deadline_ns, [this, token, alive = alive_] {
      if (*alive && waiting_ && token == wait_token_) wake_();
    });
  }
  Fiber::Yield();
  waiting_ = false;
}

common::Status SimTransport::Wait(Clock::time_point deadline, bool /*want_write*/) {
  if (killed_) return common::Unavailable("the process was killed");
  if (!queue_.empty()) return common::Status::Ok();
  const uint64_t deadline_ns =
      deadline == Clock::time_point::max()
          ? UINT64_MAX
          : static_cast<uint64_t>(std::max<int64_t>(
                0, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count()));
  if (deadline_ns <= world_.now()) return common::Status::Ok();
  Block(deadline_ns);
  if (killed_) return common::Unavailable("the process was killed");
  return common::Status::Ok();
}

common::Status SimTransport::SleepUntil(uint64_t ns) {
  while (!killed_ && world_.now() < ns) Block(ns);
  if (killed_) return common::Unavailable("the process was killed");
  return common::Status::Ok();
}

}  // namespace aggswitch::sim
