#include "dataplane/parameter_store.h"

#include <algorithm>
#include <cstring>

namespace aggswitch::dataplane {

namespace {

size_t TableSize(uint32_t capacity) {
  size_t size = 16;
  while (size < 2 * size_t{capacity}) size <<= 1;
  return size;
}

}  // namespace

ParameterStore::ParameterStore(uint32_t capacity, uint32_t max_payload, uint32_t max_jobs,
                               uint16_t n_workers)
    : capacity_(capacity),
      max_payload_(max_payload),
      max_jobs_(max_jobs),
      n_workers_(std::max<uint16_t>(1, n_workers)),
      mask_(TableSize(capacity) - 1),
      memory_(new uint8_t[size_t{capacity} * max_payload]),
      table_(new Copy[mask_ + 1]),
      free_(new uint32_t[capacity]),
      jobs_(new JobUse[max_jobs]) {
  for (uint32_t b = 0; b < capacity; ++b) free_[b] = capacity - 1 - b;
  n_free_ = capacity;
}

ParameterStore::~ParameterStore() = default;

size_t ParameterStore::Home(uint16_t job_index, uint32_t seq, uint16_t member) const {
  const uint64_t key = uint64_t{seq} << 32 | uint64_t{job_index} << 16 | member;
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
}

size_t ParameterStore::Probe(const aggregator::Job& job, uint32_t seq, uint16_t member) const {
  // At most half full: a free position ends every probe run.
  size_t i = Home(job.index(), seq, member);
  for (;;) {
    const Copy& c = table_[i];
    if (c.buffer == kNoBuffer ||
        (c.seq == seq && c.member == member && c.job_index == job.index() &&
         c.job_generation == job.generation())) {
      return i;
    }
    i = (i + 1) & mask_;
  }
}

bool ParameterStore::Charge(const aggregator::Job& job) {
  JobUse& use = jobs_[job.index()];
  uint32_t count = use.count.load(std::memory_order_relaxed);
  if (use.generation.load(std::memory_order_relaxed) != job.generation()) {
    // The index's earlier job is gone: its leftovers are swept uncounted.
    use.generation.store(job.generation(), std::memory_order_relaxed);
    count = 0;
  }
  if (count >= Share(job)) return false;
  use.count.store(count + 1, std::memory_order_relaxed);
  return true;
}

void ParameterStore::Uncharge(uint16_t job_index, uint32_t job_generation) {
  JobUse& use = jobs_[job_index];
  const uint32_t count = use.count.load(std::memory_order_relaxed);
  if (use.generation.load(std::memory_order_relaxed) == job_generation && count != 0) {
    use.count.store(count - 1, std::memory_order_relaxed);
  }
}

uint32_t ParameterStore::PopFree() {
  if (n_free_ == 0) return kNoBuffer;
  used_.store(used_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return free_[--n_free_];
}

void ParameterStore::PushFree(uint32_t buffer) {
  free_[n_free_++] = buffer;
  used_.store(used_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

ParameterStore::Kept ParameterStore::Keep(const aggregator::Job& job, uint16_t member,
                                          const aggregator::AggPacket& pkt) {
  const aggregator::AggHeader& h = *pkt.header;
  const uint32_t seq = h.seq.host();
  if (pkt.payload_len > max_payload_) return Kept::kFull;  // larger than any port's MTU allows
  const size_t i = Probe(job, seq, member);
  Copy& c = table_[i];
  Kept kept = Kept::kReplaced;
  if (c.buffer == kNoBuffer) {
    if (n_free_ == 0) return Kept::kFull;
    if (!Charge(job)) return Kept::kJobFull;
    c.buffer = PopFree();
    c.job_id = job.id();
    c.job_generation = job.generation();
    c.job_index = job.index();
    c.seq = seq;
    c.member = member;
    c.data = BufferData(c.buffer);
    kept = Kept::kStored;
  }
  c.elem_count = h.elem_count.host();
  c.dtype = h.dtype;
  c.op = h.op;
  c.scale = h.scale;
  c.len_ = pkt.payload_len;
  std::memcpy(BufferData(c.buffer), pkt.payload, pkt.payload_len);
  return kept;
}

const ParameterStore::Copy* ParameterStore::Find(const aggregator::Job& job, uint32_t seq,
                                                 uint16_t member) const {
  const Copy& c = table_[Probe(job, seq, member)];
  return c.buffer == kNoBuffer ? nullptr : &c;
}

void ParameterStore::Release(const Copy* copy) {
  const size_t i = static_cast<size_t>(copy - table_.get());
  Uncharge(copy->job_index, copy->job_generation);
  PushFree(copy->buffer);
  EraseAt(i);
}

void ParameterStore::EraseAt(size_t i) {
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    const Copy& next = table_[j];
    if (next.buffer == kNoBuffer) break;
    const size_t home = Home(next.job_index, next.seq, next.member);
    // `next` may fill the hole at i unless its home lies cyclically in (i, j].
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      table_[i] = next;
      i = j;
    }
  }
  table_[i].buffer = kNoBuffer;
}

void ParameterStore::Sweep(const aggregator::JobTable& jobs, uint32_t budget) {
  if (used() == 0) return;
  for (uint32_t n = 0; n < budget; ++n) {
    const Copy& c = table_[sweep_at_];
    if (c.buffer != kNoBuffer) {
      const aggregator::Job* job = jobs.Find(c.job_id);
      if (job == nullptr || job->generation() != c.job_generation) {
        Uncharge(c.job_index, c.job_generation);
        PushFree(c.buffer);
        EraseAt(sweep_at_);  // a later entry may have moved here: look again
        continue;
      }
    }
    sweep_at_ = (sweep_at_ + 1) & mask_;
  }
}

uint32_t ParameterStore::TakeBuffer(const aggregator::Job& job) {
  if (n_free_ == 0 || !Charge(job)) return kNoBuffer;
  return PopFree();
}

bool ParameterStore::HasRoomFor(const aggregator::Job& job) const {
  return n_free_ != 0 && JobUsed(job.index(), job.generation()) < Share(job);
}

void ParameterStore::GiveBuffer(uint16_t job_index, uint32_t job_generation, uint32_t buffer) {
  Uncharge(job_index, job_generation);
  PushFree(buffer);
}

uint32_t ParameterStore::JobUsed(uint16_t index, uint32_t generation) const {
  if (index >= max_jobs_) return 0;
  const JobUse& use = jobs_[index];
  return use.generation.load(std::memory_order_relaxed) == generation
             ? use.count.load(std::memory_order_relaxed)
             : 0;
}

}  // namespace aggswitch::dataplane
