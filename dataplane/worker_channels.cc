#include "dataplane/worker_channels.h"

#include <rte_errno.h>
#include <rte_lcore.h>

namespace aggswitch::dataplane {
namespace {

constexpr unsigned kSpSc = RING_F_SP_ENQ | RING_F_SC_DEQ;

// A ring of `size` elements of `elem_size` bytes (8: pointers).
RingPtr MakeRing(const std::string& name, unsigned elem_size, unsigned size, unsigned flags) {
  return RingPtr(rte_ring_create_elem(name.c_str(), elem_size, size,
                                      static_cast<int>(rte_socket_id()), flags));
}

}  // namespace

common::Result<std::unique_ptr<WorkerChannels>> WorkerChannels::Create(const Options& o) {
  std::unique_ptr<WorkerChannels> c(new WorkerChannels());
  const auto failed = [&](const char* what) {
    return common::ResourceExhausted(std::string("cannot create the ") + what + " ring of worker " +
                                     o.suffix + ": " + rte_strerror(rte_errno));
  };
  c->learn = MakeRing("agg_learn_" + o.suffix, sizeof(LearnRequest), kLearnRingSize, kSpSc);
  if (!c->learn) return failed("learn");
  if (o.telemetry) {
    c->int_records = MakeRing("agg_int_rec_" + o.suffix, sizeof(IntHopRecord), kIntRecordRingSize, kSpSc);
    if (!c->int_records) return failed("INT record");
  }
  if (!o.aggregation) return c;

  c->tan_up = MakeRing("agg_tan_up_" + o.suffix, sizeof(void*), kTanRingSize, kSpSc);
  c->tan_down = MakeRing("agg_tan_down_" + o.suffix, sizeof(void*), kTanRingSize, kSpSc);
  c->neighbors = MakeRing("agg_neigh_" + o.suffix, sizeof(NeighborReport), kNeighborRingSize, kSpSc);
  if (!c->tan_up || !c->tan_down || !c->neighbors) return failed("tree");
  c->samples_free = MakeRing("agg_smp_free_" + o.suffix, sizeof(void*), kSampleRingSize, kSpSc);
  c->samples_full = MakeRing("agg_smp_full_" + o.suffix, sizeof(void*), kSampleRingSize, kSpSc);
  if (!c->samples_free || !c->samples_full) return failed("offset sample");
  for (unsigned k = 0; k < kOffsetSamples; ++k) {
    auto& storage = c->samples_.emplace_back(std::make_unique<SampleStorage>());
    storage->offsets.resize(o.max_fan_in);
    storage->sample.offsets = storage->offsets.data();
    OffsetSample* sample = &storage->sample;
    (void)rte_ring_sp_enqueue_elem(c->samples_free.get(), &sample, sizeof(void*));
  }
  if (o.control_tx) {
    c->control_tx = MakeRing("agg_ctl_tx_" + o.suffix, sizeof(FrameRef), kNeighborRingSize, kSpSc);
    if (!c->control_tx) return failed("control TX");
  }
  if (o.in_band) {
    c->upcall = MakeRing("agg_upcall_" + o.suffix, sizeof(FrameRef), kUpcallRingSize, kSpSc);
    c->reinject = MakeRing("agg_reinject_" + o.suffix, sizeof(FrameRef), kUpcallRingSize, kSpSc);
    if (!c->upcall || !c->reinject) return failed("registration");
  }
  if (o.aggregation) {
    c->escalate = MakeRing("agg_escalate_" + o.suffix, sizeof(Escalation), kEscalateRingSize, kSpSc);
    c->relocate = MakeRing("agg_relocate_" + o.suffix, sizeof(Relocation), kEscalateRingSize, kSpSc);
    if (!c->escalate || !c->relocate) return failed("escalation");
  }
  if (o.handoff) {
    // Every worker produces, this one consumes.
    c->handoff = MakeRing("agg_handoff_" + o.suffix, sizeof(FrameRef), kHandoffRingSize, RING_F_SC_DEQ);
    if (!c->handoff) return failed("hand-off");
  }
  c->slot_dump = std::make_unique<SlotDumpExchange>(o.slot_dump_capacity);
  c->bypass_dump = std::make_unique<BypassDumpExchange>(o.bypass_dump_capacity);
  return c;
}

WorkerChannels::~WorkerChannels() {
  for (rte_ring* ring : {upcall.get(), reinject.get(), handoff.get(), control_tx.get()}) {
    if (ring == nullptr) continue;
    FrameRef f;
    while (rte_ring_sc_dequeue_elem(ring, &f, sizeof(f)) == 0) rte_pktmbuf_free(f.m);
  }
  if (escalate) {
    Escalation e;
    while (rte_ring_sc_dequeue_elem(escalate.get(), &e, sizeof(e)) == 0) rte_pktmbuf_free(e.frame.m);
  }
  if (relocate) {
    Relocation r;
    while (rte_ring_sc_dequeue_elem(relocate.get(), &r, sizeof(r)) == 0) {
      if (r.frame.m != nullptr) rte_pktmbuf_free(r.frame.m);
    }
  }
  for (rte_ring* ring : {tan_up.get(), tan_down.get()}) {
    if (ring == nullptr) continue;
    rte_mbuf* m;
    while (rte_ring_sc_dequeue_elem(ring, &m, sizeof(m)) == 0) rte_pktmbuf_free(m);
  }
}

}  // namespace aggswitch::dataplane
