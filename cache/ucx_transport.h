// The data cache's RDMA transport, over UCX (libucp): a worker, registered
// memory with packed remote keys, client-server endpoints, one-sided gets
// and the few active messages the cache's handshake needs.
//
// On hosts with an RDMA NIC, UCX runs over rdma-core verbs (RoCEv2 or
// InfiniBand); elsewhere over TCP, through the same calls. `tls` (UCX_TLS)
// picks the transports: the default "rc_verbs,ud_verbs,tcp" lets UCX use
// verbs where there are devices and TCP where there are none, and never its
// shared-memory transports, so that traffic between namespaces of one host
// crosses the network as it would between hosts. Transports() says which
// one an endpoint chose.
//
// The handshake (active messages, little-endian structs below):
//   loader -> daemon  kAmHello       HelloRequest + job name
//   daemon -> loader  kAmHelloReply  HelloReply (+ the packed remote key when accepted)
//   loader -> daemon  kAmFill        an item name the loader missed (read-through fill)
// A daemon refuses a connection from an address outside its allow list
// before any message; a job outside its job list gets HelloReply::kRefused.
//
//   ASSIGN_OR_RETURN(auto ucx, UcxWorker::Create({.tls = "tcp"}));
//   ASSIGN_OR_RETURN(auto reg, ucx->Map(buf, len));
//   ucp_ep_h ep = ...; ucs_status_ptr_t r = ucx->Get(ep, dest, len, reg->memh(), addr, rkey);
//
// Thread safety: a worker is single-threaded (UCS_THREAD_MODE_SINGLE):
// every call on one worker, and every endpoint and request of it, from the
// one thread that owns it.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace aggswitch::cache {

enum AmId : uint16_t { kAmHello = 1, kAmHelloReply = 2, kAmFill = 3 };

struct HelloRequest {
  static constexpr uint32_t kMagic = 0x41474843;  // "AGHC"
  uint32_t magic = kMagic;
  uint32_t job_len = 0;   // the job name follows
};

struct HelloReply {
  enum Status : int32_t { kAccepted = 0, kRefused = 1, kBadRequest = 2 };
  int32_t status = kAccepted;
  uint32_t rkey_id = 0;
  uint64_t region_base = 0;
  uint64_t region_size = 0;
  uint32_t rkey_len = 0;  // the packed key follows (accepted), or a reason text
  uint32_t reserved = 0;
};

class UcxWorker;

// A registration of memory with UCX (ucp_mem_map), unmapped when destroyed.
class UcxMemory {
 public:
  ~UcxMemory();
  UcxMemory(const UcxMemory&) = delete;
  UcxMemory& operator=(const UcxMemory&) = delete;
  ucp_mem_h memh() const { return memh_; }
  // The packed remote key, for peers to unpack on their endpoint.
  common::Result<std::string> PackedKey() const;

 private:
  friend class UcxWorker;
  UcxMemory(ucp_context_h ctx, ucp_mem_h memh) : ctx_(ctx), memh_(memh) {}
  ucp_context_h ctx_;
  ucp_mem_h memh_;
};

class UcxWorker {
 public:
  struct Options {
    std::string tls = "rc_verbs,ud_verbs,tcp";  // UCX_TLS
    std::string net_devices;                     // UCX_NET_DEVICES; empty: all
  };
  static common::Result<std::unique_ptr<UcxWorker>> Create(const Options& options);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_context_h context() const { return ctx_; }
  ucp_worker_h worker() const { return worker_; }

  // Registers [addr, addr+len) for RDMA.
  common::Result<std::unique_ptr<UcxMemory>> Map(void* addr, size_t len);
  // Whether UCX can register and move GPU (CUDA) memory on this host.
  bool SupportsCuda() const;

  // Drives UCX until it has nothing to do; the number of events.
  unsigned Progress();
  // Sleeps until UCX has work or `timeout_ms` passes (ucp_worker_arm + poll).
  void Wait(int timeout_ms);

  // Connects to a listener at "a.b.c.d:port". `on_error(arg, ep, status)`
  // runs (inside Progress) when the peer fails.
  common::Result<ucp_ep_h> Connect(const std::string& address, ucp_err_handler_cb_t on_error,
                                   void* arg);
  // Closes an endpoint, forcibly when `force` (its requests fail with
  // UCS_ERR_CANCELED), and waits for the close.
  void Close(ucp_ep_h ep, bool force);

  // A one-sided read of `len` bytes at remote `addr` into `dest`. Null when
  // done at once, UCS_PTR_IS_ERR on error, else a request to Poll.
  ucs_status_ptr_t Get(ucp_ep_h ep, void* dest, size_t len, ucp_mem_h dest_memh, uint64_t addr,
                       ucp_rkey_h rkey);
  // An active message; same return convention.
  ucs_status_ptr_t SendAm(ucp_ep_h ep, AmId id, const void* data, size_t len, bool want_reply);
  // A request's state: UCS_INPROGRESS, or its final status (and it is freed).
  static ucs_status_t Poll(ucs_status_ptr_t request);
  // Waits for `request` with progress, up to timeout_ms (then cancels it).
  ucs_status_t WaitFor(ucs_status_ptr_t request, int timeout_ms);

  // The transports the endpoint's lanes use, e.g. "tcp/eth0" or "rc_verbs/mlx5_0:1".
  static std::string Transports(ucp_ep_h ep);

  // Active messages of an id no caller registered a handler for: counted
  // and dropped. Every id has a handler from Create on; a caller's
  // ucp_worker_set_am_recv_handler replaces the one of its id. [any thread]
  uint64_t unknown_messages() const { return unknown_messages_.load(std::memory_order_relaxed); }

 private:
  UcxWorker() = default;
  common::Status HandleEveryId();
  static ucs_status_t OnUnknown(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  std::atomic<uint64_t> unknown_messages_{0};
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
};

}  // namespace aggswitch::cache
