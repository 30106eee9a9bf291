#include "dataplane/unmap_guard.h"

#include <rte_lcore.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>

namespace aggswitch::dataplane {
namespace {

// Whether this thread is an online worker: it must never wait for itself.
thread_local bool t_online = false;

}  // namespace

rte_rcu_qsbr* UnmapGuard::Qsbr() {
  // Made on first use (a worker going online, or the first munmap) and never
  // freed: munmap may still be called from exit handlers.
  static rte_rcu_qsbr* const qsbr = [] {
    const size_t bytes =
        RTE_ALIGN_CEIL(rte_rcu_qsbr_get_memsize(RTE_MAX_LCORE), RTE_CACHE_LINE_SIZE);
    auto* v = static_cast<rte_rcu_qsbr*>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, bytes));
    if (v == nullptr || rte_rcu_qsbr_init(v, RTE_MAX_LCORE) != 0) std::abort();
    return v;
  }();
  return qsbr;
}

void UnmapGuard::Online(unsigned lcore) {
  rte_rcu_qsbr_thread_register(Qsbr(), lcore);
  rte_rcu_qsbr_thread_online(Qsbr(), lcore);
  t_online = true;
}

void UnmapGuard::Offline(unsigned lcore) {
  t_online = false;
  rte_rcu_qsbr_thread_offline(Qsbr(), lcore);
  rte_rcu_qsbr_thread_unregister(Qsbr(), lcore);
}

void UnmapGuard::Synchronize() {
  if (t_online) return;
  rte_rcu_qsbr* v = Qsbr();
  const uint64_t token = rte_rcu_qsbr_start(v);
  // Yield rather than spin: the worker may share this thread's CPU.
  while (rte_rcu_qsbr_check(v, token, false) == 0) sched_yield();
}

}  // namespace aggswitch::dataplane

// Interposes libc's munmap for every shared object of the process (see the
// header). The raw system call is what glibc's munmap is.
extern "C" int munmap(void* addr, size_t length) noexcept {
  aggswitch::dataplane::UnmapGuard::Synchronize();
  return static_cast<int>(syscall(SYS_munmap, addr, length));
}
