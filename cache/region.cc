#include "cache/region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cache/placement.h"

namespace aggswitch::cache {
namespace {
constexpr uint64_t k2MiB = uint64_t{2} << 20;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}
}  // namespace

bool HeaderConfirms(const ItemHeader& h, uint64_t key_hash, uint64_t version, uint64_t length) {
  return h.state.load(std::memory_order_acquire) == ItemHeader::kValid && h.key_hash == key_hash &&
         h.version == version && h.length == length;
}

common::Result<std::unique_ptr<Region>> Region::Create(const std::string& path, uint64_t size,
                                                       bool hugepages) {
  if (size == 0) return common::InvalidArgument("a cache region of 0 bytes");
  size = (size + k2MiB - 1) & ~(k2MiB - 1);
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) return common::Unavailable(Errno("cannot create the cache region", path));
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const std::string why = Errno("cannot size the cache region", path);
    ::close(fd);
    ::unlink(path.c_str());
    return common::ResourceExhausted(why);
  }
  // MAP_POPULATE: the memory is touched now, not on the first remote read.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    const std::string why =
        Errno(hugepages ? "cannot map the cache region on hugepages (are there enough?)"
                        : "cannot map the cache region",
              path);
    ::unlink(path.c_str());
    return common::ResourceExhausted(why);
  }
  return std::unique_ptr<Region>(new Region(path, static_cast<uint8_t*>(p), size));
}

Region::~Region() {
  ::munmap(base_, size_);
  ::unlink(path_.c_str());
}

int64_t Region::FreeAt(uint64_t need) const {
  if (log_.empty()) return need <= size_ ? 0 : -1;
  const uint64_t tail = log_.front().offset;
  if (head_ > tail) {
    if (size_ - head_ >= need) return static_cast<int64_t>(head_);
    if (tail >= need) return 0;  // wrap
    return -1;
  }
  if (head_ < tail && tail - head_ >= need) return static_cast<int64_t>(head_);
  return -1;  // head_ == tail with items: full
}

void Region::Forget(const Entry& e) {
  auto it = index_.find(e.item);
  if (it == index_.end() || it->second != e.offset) return;  // dead already
  Header(e.offset)->state.store(0, std::memory_order_release);
  index_.erase(it);
  used_.fetch_sub(e.footprint, std::memory_order_relaxed);
  items_.fetch_sub(1, std::memory_order_relaxed);
}

void Region::EvictOldest(std::vector<EvictedItem>* evicted) {
  const Entry e = log_.front();
  log_.pop_front();
  auto it = index_.find(e.item);
  if (it != index_.end() && it->second == e.offset) {
    Forget(e);
    evictions_.fetch_add(1, std::memory_order_relaxed);
    if (evicted != nullptr) evicted->push_back({e.item, e.length});
  }
  if (log_.empty()) head_ = 0;
}

common::Result<Region::Reservation> Region::Reserve(std::string_view item, uint64_t length,
                                                    std::vector<EvictedItem>* evicted) {
  const uint64_t need = Footprint(length);
  if (need > size_) {
    return common::ResourceExhausted("item " + std::string(item) + " (" + std::to_string(length) +
                                     " bytes) is larger than the cache region (" +
                                     std::to_string(size_) + " bytes)");
  }
  Evict(item);
  int64_t at;
  while ((at = FreeAt(need)) < 0) EvictOldest(evicted);
  const auto offset = static_cast<uint64_t>(at);
  ItemHeader* h = Header(offset);
  h->state.store(0, std::memory_order_release);
  head_ = offset + need;
  if (head_ == size_) head_ = 0;
  log_.push_back(Entry{std::string(item), offset, need, length});
  return Reservation{std::string(item), offset, length, base_ + offset + sizeof(ItemHeader)};
}

void Region::Commit(const Reservation& r, uint64_t version, uint32_t crc32c) {
  ItemHeader* h = Header(r.offset);
  h->key_hash = ItemHash(r.item);
  h->version = version;
  h->length = r.length;
  h->crc32c = crc32c;
  h->state.store(ItemHeader::kValid, std::memory_order_release);
  index_[r.item] = r.offset;
  used_.fetch_add(Footprint(r.length), std::memory_order_relaxed);
  items_.fetch_add(1, std::memory_order_relaxed);
}

void Region::Abandon(const Reservation& r) {
  if (log_.empty() || log_.back().offset != r.offset) return;
  log_.pop_back();
  head_ = r.offset;
  if (log_.empty()) head_ = 0;
}

bool Region::Evict(std::string_view item) {
  auto it = index_.find(std::string(item));
  if (it == index_.end()) return false;
  const uint64_t offset = it->second;
  Forget(Entry{std::string(item), offset, Footprint(HeaderAt(offset)->length), 0});
  return true;
}

int64_t Region::Find(std::string_view item) const {
  auto it = index_.find(std::string(item));
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

Region::Stats Region::stats() const {
  return Stats{size_, used_.load(std::memory_order_relaxed), items_.load(std::memory_order_relaxed),
               evictions_.load(std::memory_order_relaxed)};
}

common::Result<std::unique_ptr<RegionView>> RegionView::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return common::Unavailable(Errno("cannot open the cache region", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    return common::Unavailable("the cache region " + path + " is empty");
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return common::Unavailable(Errno("cannot map the cache region", path));
  return std::unique_ptr<RegionView>(
      new RegionView(static_cast<const uint8_t*>(p), static_cast<uint64_t>(st.st_size)));
}

RegionView::~RegionView() { ::munmap(const_cast<uint8_t*>(base_), size_); }

}  // namespace aggswitch::cache
