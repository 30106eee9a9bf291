// A simulated host: what its kernel would do for the processes on it. It
// answers ARP for its address, takes the IPv4/UDP frames addressed to it
// and hands each datagram to the socket bound to its port, and sends UDP
// datagrams as Ethernet frames to the MAC its neighbour table has for the
// destination (the switches' addresses, entered by the scenario as a
// resolved neighbour would be).
//
// SimTransport is the client engine's transport (client/internal/transport.h)
// over one such socket: a rank's engine sends and receives real datagrams
// through it, and when it waits, its fiber gives the thread back to the
// simulator until a datagram arrives or its deadline passes.
//
//   Host host(world, "r0", mac, ip);
//   host.SetUplink(&link_to_switch);
//   host.AddNeighbor(switch_ip, switch_mac);
//   auto t = std::make_unique<SimTransport>(world, host, 0, buffers, mtu, wake);
//
// Thread safety: the simulator's thread only (fibers included: one runs at a time).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/internal/transport.h"
#include "common/net_addr.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

class Host final : public FrameSink {
 public:
  // A datagram for a bound port: its payload and sender.
  using Deliver = std::function<void(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port)>;

  Host(World& world, std::string name, common::MacAddr mac, uint32_t ip);

  void SetUplink(Link* up) { up_ = up; }
  void AddNeighbor(uint32_t ip, const common::MacAddr& mac) { neighbors_[ip] = mac; }

  // Binds `port` (0: the next free ephemeral one) to `deliver`; returns the
  // port, 0 when it is taken.
  uint16_t Bind(uint16_t port, Deliver deliver);
  void Unbind(uint16_t port);
  // Sends one UDP datagram from `src_port`; false when the destination has
  // no neighbour entry (dropped).
  bool Send(uint16_t src_port, uint32_t dst_ip, uint16_t dst_port, const uint8_t* data, size_t len);

  void Receive(Frame frame) override;

  const std::string& name() const { return name_; }
  uint32_t ip() const { return ip_; }
  const common::MacAddr& mac() const { return mac_; }
  // Datagrams for a port nobody has bound (a killed process's), and frames
  // it could not send (no neighbour).
  uint64_t unbound_drops() const { return unbound_drops_; }
  uint64_t no_neighbor() const { return no_neighbor_; }

 private:
  World& world_;
  const std::string name_;
  const common::MacAddr mac_;
  const uint32_t ip_;
  Link* up_ = nullptr;
  std::map<uint32_t, common::MacAddr> neighbors_;
  std::map<uint16_t, Deliver> sockets_;
  uint16_t next_ephemeral_ = 40000;
  uint16_t ip_id_ = 0;
  uint64_t unbound_drops_ = 0;
  uint64_t no_neighbor_ = 0;
};

class SimTransport final : public client::internal::Transport {
 public:
  // Binds `port` (0: ephemeral) on `host`. `wake` makes the owner's fiber
  // run again soon (after the event in progress), when it waits.
  SimTransport(World& world, Host& host, uint16_t port, uint32_t send_buffers, uint32_t mtu,
               std::function<void()> wake);
  ~SimTransport() override;

  uint8_t* send_buffer(uint32_t i) override { return buffers_[i].data(); }
  bool SendBufferFree(uint32_t) override { return true; }
  common::Result<uint32_t> Send(const client::internal::OutDatagram* datagrams, uint32_t n) override;
  common::Result<std::span<const client::internal::InDatagram>> Receive() override;
  common::Status Wait(Clock::time_point deadline, bool want_write) override;
  void Wake() const override { wake_(); }
  uint16_t local_port() const override { return port_; }
  client::internal::TransportStats stats() const override { return {}; }

  // Waits (keeping what arrives for the next Receive) until `ns`. Fails when
  // the process is killed meanwhile.
  common::Status SleepUntil(uint64_t ns);
  // The process behind the socket died: its waits and sends fail from now
  // on, and nothing reaches it.
  void Kill();
  bool killed() const { return killed_; }
  // Whether the owner's fiber waits in Wait or SleepUntil.
  bool waiting() const { return waiting_; }
  // Calls `tap` with every datagram sent from now on (a packet capture).
  void SetTap(std::function<void(const uint8_t* data, size_t len)> tap) { tap_ = std::move(tap); }

 private:
  struct Datagram {
    std::vector<uint8_t> bytes;
    sockaddr_in from{};
  };
  void OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port);
  // Yields until woken, or until `deadline_ns` (UINT64_MAX: no deadline).
  void Block(uint64_t deadline_ns);

  World& world_;
  Host& host_;
  uint16_t port_ = 0;
  std::vector<std::vector<uint8_t>> buffers_;
  std::function<void()> wake_;
  std::function<void(const uint8_t*, size_t)> tap_;
  std::deque<Datagram> queue_;
  std::vector<Datagram> batch_;
  std::vector<client::internal::InDatagram> in_;
  bool killed_ = false;
  bool waiting_ = false;
  uint64_t wait_token_ = 0;
  // False once the transport is gone: its deadlines may still be queued.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace aggswitch::sim
