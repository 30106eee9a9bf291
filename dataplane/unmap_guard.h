// Keeps pages a worker lcore may be reading mapped until it has left the
// burst that reads them.
//
// Why: a PMD that shares memory with a peer process unmaps the peer's regions
// from the EAL interrupt thread the moment the peer disconnects. DPDK 22.11's
// memif does so in memif_disconnect(): it clears its "connected" flag, which
// rte_eth_rx_burst / rte_eth_tx_burst check on entry, then munmap()s the rings
// and buffers at once. A worker lcore that entered a burst just before (or was
// preempted inside one) then touches unmapped memory and the switch dies with
// SIGSEGV; tests/memif_churn_test.cc reproduces it in a few cycles.
//
// The fix is a grace period in munmap itself. This file's translation unit
// defines munmap(), which the dynamic linker resolves ahead of libc's for the
// PMD shared objects (the executable comes first in the lookup scope). Called
// from any thread but a worker lcore, it waits until every online worker has
// passed a quiescent point, i.e. finished the poll it was in when the PMD
// cleared its flag, and then unmaps with the raw system call. Workers report
// quiescent once per poll pass, so the wait is one pass (microseconds); it
// never happens on a worker lcore, and munmap is rare on the control side.
// The grace period is DPDK's QSBR: the PMD's flag store comes before the
// token increment (a locked add), and a worker's next burst comes after its
// acquire load of that token, so the next burst sees the flag cleared.
//
//   [worker lcore]  UnmapGuard::Online(lcore);
//                   while (running) { PollOnce(); UnmapGuard::Quiescent(lcore); }
//                   UnmapGuard::Offline(lcore);
//
// Thread safety: Online, Quiescent and Offline are called by the worker lcore
// `lcore` itself (any lcore id below RTE_MAX_LCORE). munmap may be called
// from any thread at any time, before and after the dataplane runs.
#pragma once

#include <rte_rcu_qsbr.h>

#include <cstdint>

namespace aggswitch::dataplane {

class UnmapGuard {
 public:
  // The worker starts polling: munmap elsewhere waits for it from now on.
  // [worker lcore]
  static void Online(unsigned lcore);
  // The worker holds no pointer into port memory (between two poll passes).
  // [worker lcore]
  static void Quiescent(unsigned lcore) { rte_rcu_qsbr_quiescent(Qsbr(), lcore); }
  // The worker stops polling; munmap no longer waits for it. [worker lcore]
  static void Offline(unsigned lcore);

  // Waits for a grace period of every online worker, unless called on a
  // worker lcore. What munmap() calls first. [any thread]
  static void Synchronize();

 private:
  static rte_rcu_qsbr* Qsbr();
};

}  // namespace aggswitch::dataplane
