#include "cache/ucx_transport.h"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "common/net_addr.h"

namespace aggswitch::cache {
namespace {

std::string UcsError(const std::string& what, ucs_status_t s) {
  return what + ": " + ucs_status_string(s);
}

void NoopSend(void* /*request*/, ucs_status_t /*status*/, void* /*user*/) {}

}  // namespace

UcxMemory::~UcxMemory() { ucp_mem_unmap(ctx_, memh_); }

common::Result<std::string> UcxMemory::PackedKey() const {
  void* buf = nullptr;
  size_t size = 0;
  const ucs_status_t s = ucp_rkey_pack(ctx_, memh_, &buf, &size);
  if (s != UCS_OK) return common::Internal(UcsError("ucp_rkey_pack", s));
  std::string key(static_cast<const char*>(buf), size);
  ucp_rkey_buffer_release(buf);
  return key;
}

common::Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(const Options& options) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return common::Internal(UcsError("ucp_config_read", s));
  for (const auto& [key, value] : {std::pair{"TLS", &options.tls}, {"NET_DEVICES", &options.net_devices}}) {
    if (value->empty()) continue;
    s = ucp_config_modify(config, key, value->c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return common::InvalidArgument(UcsError(std::string("UCX_") + key + "=" + *value, s));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &w->ctx_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    return common::Unavailable(UcsError("ucp_init (UCX_TLS=" + options.tls + ")", s));
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(w->ctx_, &wp, &w->worker_);
  if (s != UCS_OK) return common::Unavailable(UcsError("ucp_worker_create", s));
  s = ucp_worker_get_efd(w->worker_, &w->efd_);
  if (s != UCS_OK) w->efd_ = -1;  // Wait() then naps instead
  RETURN_IF_ERROR(w->HandleEveryId());
  return w;
}

// UCX 1.13 (Debian 12's libucx0) reads a message's handler entry before it
// checks the message's id against the worker's table, and a registration
// that grows the table leaves the entries below the new id unset. A message
// whose id has no handler then reads past the table, or calls a stray
// pointer: one message from any peer would crash the process. The table is
// grown once to the largest id, and every entry set, before any endpoint
// exists; the callers' registrations replace single entries of it.
common::Status UcxWorker::HandleEveryId() {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.cb = &UcxWorker::OnUnknown;
  hp.arg = this;
  for (uint32_t id = std::numeric_limits<uint16_t>::max() + 1u; id-- > 0;) {  // the largest first
    hp.id = id;
    const ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return common::Internal(UcsError("ucp_worker_set_am_recv_handler", s));
  }
  return common::Status::Ok();
}

ucs_status_t UcxWorker::OnUnknown(void* arg, const void* /*header*/, size_t /*header_length*/, void* /*data*/,
                                  size_t /*length*/, const ucp_am_recv_param_t* /*param*/) {
  static_cast<UcxWorker*>(arg)->unknown_messages_.fetch_add(1, std::memory_order_relaxed);
  return UCS_OK;  // dropped; a rendezvous is declined
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

common::Result<std::unique_ptr<UcxMemory>> UcxWorker::Map(void* addr, size_t len) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = addr;
  mp.length = len;
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(ctx_, &mp, &memh);
  if (s != UCS_OK) return common::ResourceExhausted(UcsError("ucp_mem_map", s));
  return std::unique_ptr<UcxMemory>(new UcxMemory(ctx_, memh));
}

bool UcxWorker::SupportsCuda() const {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(ctx_, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

unsigned UcxWorker::Progress() {
  unsigned total = 0;
  unsigned n;
  while ((n = ucp_worker_progress(worker_)) != 0) total += n;
  return total;
}

void UcxWorker::Wait(int timeout_ms) {
  if (efd_ < 0) {
    poll(nullptr, 0, std::min(timeout_ms, 1));
    return;
  }
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events pending: progress now
  pollfd pfd{efd_, POLLIN, 0};
  poll(&pfd, 1, timeout_ms);
}

common::Result<ucp_ep_h> UcxWorker::Connect(const std::string& address,
                                            ucp_err_handler_cb_t on_error, void* arg) {
  auto ep_addr = common::Ipv4Endpoint::Parse(address);
  if (!ep_addr || ep_addr->port == 0) {
    return common::InvalidArgument("a UCX address " + address + ": expected a.b.c.d:port");
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(ep_addr->port);
  sa.sin_addr.s_addr = htonl(ep_addr->ip.addr);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  ep.sockaddr.addrlen = sizeof(sa);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = on_error;
  ep.err_handler.arg = arg;
  ucp_ep_h handle = nullptr;
  const ucs_status_t s = ucp_ep_create(worker_, &ep, &handle);
  if (s != UCS_OK) return common::Unavailable(UcsError("connect to " + address, s));
  return handle;
}

void UcxWorker::Close(ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ucp_request_check_status(r) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker_);
  }
  if (ucp_request_check_status(r) == UCS_INPROGRESS) {
    // A peer that never answers a graceful close: force it.
    ucp_request_free(r);
    if (!force) Close(ep, true);
    return;
  }
  ucp_request_free(r);
}

ucs_status_ptr_t UcxWorker::Get(ucp_ep_h ep, void* dest, size_t len, ucp_mem_h dest_memh,
                                uint64_t addr, ucp_rkey_h rkey) {
  ucp_request_param_t p{};
  if (dest_memh != nullptr) {
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
    p.memh = dest_memh;
  }
  return ucp_get_nbx(ep, dest, len, addr, rkey, &p);
}

ucs_status_ptr_t UcxWorker::SendAm(ucp_ep_h ep, AmId id, const void* data, size_t len,
                                   bool want_reply) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
  p.flags = want_reply ? UCP_AM_SEND_FLAG_REPLY : 0;
  p.flags |= UCP_AM_SEND_FLAG_EAGER;
  p.cb.send = NoopSend;
  return ucp_am_send_nbx(ep, id, nullptr, 0, data, len, &p);
}

ucs_status_t UcxWorker::Poll(ucs_status_ptr_t request) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  const ucs_status_t s = ucp_request_check_status(request);
  if (s != UCS_INPROGRESS) ucp_request_free(request);
  return s;
}

ucs_status_t UcxWorker::WaitFor(ucs_status_ptr_t request, int timeout_ms) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return Poll(request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Progress();
    const ucs_status_t s = ucp_request_check_status(request);
    if (s != UCS_INPROGRESS) {
      ucp_request_free(request);
      return s;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      // Cancelled requests complete within a few progress calls; one that
      // does not is left to UCX (freed, it is released when it completes).
      ucp_request_cancel(worker_, request);
      for (int i = 0; i < 1000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(request);
      return UCS_ERR_TIMED_OUT;
    }
    Wait(1);
  }
}

std::string UcxWorker::Transports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return "unknown";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  // Lanes print as "lane[1]:  0:tcp/lo.0 md[0] -> ...": take "tcp/lo".
  std::set<std::string> found;
  std::stringstream ss(std::string(text, size));
  std::free(text);
  std::string word;
  while (ss >> word) {
    const size_t colon = word.find(':');
    if (colon == std::string::npos || colon == 0 || word.find('/') == std::string::npos) continue;
    if (word.find_first_not_of("0123456789") != colon) continue;
    std::string lane = word.substr(colon + 1);
    const size_t dot = lane.rfind('.');
    if (dot != std::string::npos && dot > lane.find('/')) lane.resize(dot);
    found.insert(lane);
  }
  std::string out;
  for (const std::string& t : found) out += (out.empty() ? "" : ",") + t;
  return out.empty() ? "unknown" : out;
}

}  // namespace aggswitch::cache
