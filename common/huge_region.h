// Memory for the large tables a worker reaches at random, such as the
// aggregation slots: one anonymous mapping, 2 MiB aligned and asked to be
// backed by transparent huge pages (madvise MADV_HUGEPAGE), so that touching
// a new slot does not also cost a TLB miss per table it spans. Where the
// kernel gives no huge pages, it is ordinary zeroed memory all the same.
//
//   HugeRegion r = HugeRegion::Allocate(bytes);   // zeroed; data() == nullptr when out of memory
//   auto* slots = r.Carve<Slot>(n);               // 64-byte aligned pieces, in order
//
// Thread safety: Allocate and Carve on the thread that builds the table; the
// memory is then the table's to share as it documents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace aggswitch::common {

class HugeRegion {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugeRegion() = default;
  // A zeroed region of at least `bytes`; data() is null when the mapping fails.
  static HugeRegion Allocate(size_t bytes);
  ~HugeRegion();
  HugeRegion(HugeRegion&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        used_(std::exchange(o.used_, 0)) {}
  HugeRegion& operator=(HugeRegion&& o) noexcept;
  HugeRegion(const HugeRegion&) = delete;
  HugeRegion& operator=(const HugeRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // The next `n` objects' worth of the region, 64-byte aligned, left as
  // zeroed bytes (the caller constructs what needs constructing). Null when
  // the region is too small.
  template <typename T>
  T* Carve(size_t n) {
    const size_t at = (used_ + 63) & ~size_t{63};
    if (data_ == nullptr || at + n * sizeof(T) > size_) return nullptr;
    used_ = at + n * sizeof(T);
    return reinterpret_cast<T*>(data_ + at);
  }
  // What Carve needs for `n` objects of T after any earlier piece. [any]
  template <typename T>
  static constexpr size_t Footprint(size_t n) {
    return 63 + n * sizeof(T);
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace aggswitch::common
