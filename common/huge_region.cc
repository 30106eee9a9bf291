#include "common/huge_region.h"

#include <sys/mman.h>

namespace aggswitch::common {

HugeRegion HugeRegion::Allocate(size_t bytes) {
  HugeRegion r;
  if (bytes == 0) return r;
  const size_t size = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  // Map one huge page more and trim, so the region starts on a 2 MiB boundary.
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (raw == MAP_FAILED) return r;
  const auto addr = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (addr + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (start > addr) munmap(raw, start - addr);
  const uintptr_t end = start + size;
  const uintptr_t raw_end = addr + size + kHugePage;
  if (raw_end > end) munmap(reinterpret_cast<void*>(end), raw_end - end);
  // A hint: the memory works on ordinary pages too.
  (void)madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
  r.data_ = reinterpret_cast<uint8_t*>(start);
  r.size_ = size;
  return r;
}

HugeRegion::~HugeRegion() {
  if (data_ != nullptr) munmap(data_, size_);
}

HugeRegion& HugeRegion::operator=(HugeRegion&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    used_ = std::exchange(o.used_, 0);
  }
  return *this;
}

}  // namespace aggswitch::common
