#include "tools/agg-worker/vectors.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "aggregator/half.h"

namespace aggswitch::tools {

namespace {

using aggregator::DType;
using aggregator::ReduceOp;

// splitmix64's finalizer: a bijection that spreads every input bit.
constexpr uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void Store(uint8_t* out, size_t i, const void* v, size_t size) {
  std::memcpy(out + i * size, v, size);
}

// A float m * 2^k from 32 hash bits: 24 bits of m in [-1, 1), k in -8..8.
float SpreadFloat(uint64_t h) {
  const float m = static_cast<float>(static_cast<int32_t>(h >> 40) - (1 << 23)) / (1 << 23);
  const int k = static_cast<int>((h >> 8) % 17) - 8;
  return std::ldexp(m, k);
}

}  // namespace

GeneratedVectors::GeneratedVectors(DType dtype, ReduceOp op, uint16_t world, uint64_t seed,
                                   size_t elements)
    : dtype_(dtype),
      op_(op),
      seed_(seed),
      elements_(elements),
      int_bound_(INT32_MAX / std::max<uint16_t>(world, 1)) {
  const double half_root = std::pow(0.5, 1.0 / std::max<uint16_t>(world, 1));
  const double p = op == ReduceOp::kAnd ? half_root : 1.0 - half_root;
  bool_threshold_ = static_cast<uint64_t>(p * 0x1p53);
}

void GeneratedVectors::Read(uint16_t rank, uint32_t iteration, size_t first, size_t count,
                            uint8_t* out) const {
  const uint64_t key = Mix(Mix(Mix(seed_) ^ rank) ^ iteration);
  for (size_t j = 0; j < count; ++j) {
    const uint64_t h = Mix(key + (first + j) * 0x9E3779B97F4A7C15ull);
    switch (dtype_) {
      case DType::kInt32: {
        const int32_t v =
            op_ == ReduceOp::kSum
                ? static_cast<int32_t>(static_cast<int64_t>(h % (2 * int_bound_ + 1)) - int_bound_)
                : static_cast<int32_t>(h >> 32);
        Store(out, j, &v, 4);
        break;
      }
      case DType::kFloat32: {
        const float v = SpreadFloat(h);
        Store(out, j, &v, 4);
        break;
      }
      case DType::kFloat16:
      case DType::kBFloat16: {
        const float f = std::ldexp(SpreadFloat(h), -6);  // within [-4, 4)
        const uint16_t v =
            dtype_ == DType::kFloat16 ? aggregator::FloatToHalf(f) : aggregator::FloatToBFloat16(f);
        Store(out, j, &v, 2);
        break;
      }
      case DType::kBool:
        out[j] = (h >> 11) < bool_threshold_ ? 1 : 0;
        break;
    }
  }
}

std::string RankPath(const std::string& pattern, uint16_t rank) {
  static constexpr std::string_view kPlaceholder = "{rank}";
  std::string path = pattern;
  const std::string r = std::to_string(rank);
  for (size_t at = path.find(kPlaceholder); at != std::string::npos;
       at = path.find(kPlaceholder, at + r.size())) {
    path.replace(at, kPlaceholder.size(), r);
  }
  return path;
}

common::Result<std::unique_ptr<FileVectors>> FileVectors::Load(const std::string& pattern,
                                                               DType dtype,
                                                               const std::vector<uint16_t>& ranks) {
  std::unique_ptr<FileVectors> v(new FileVectors());
  v->element_size_ = aggregator::ElementSize(dtype);
  bool first = true;
  for (const uint16_t rank : ranks) {
    const std::string path = RankPath(pattern, rank);
    std::ifstream f(path, std::ios::binary);
    if (!f) return common::NotFound("--input: cannot open " + path + ": " + std::strerror(errno));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % v->element_size_ != 0) {
      return common::InvalidArgument("--input: " + path + " holds " + std::to_string(bytes.size()) +
                                     " bytes, not a whole number of " +
                                     std::string(DTypeName(dtype)) + " elements");
    }
    const size_t n = bytes.size() / v->element_size_;
    if (first) {
      v->elements_ = n;
      first = false;
    } else if (n != v->elements_) {
      return common::InvalidArgument("--input: " + path + " holds " + std::to_string(n) +
                                     " elements, " + RankPath(pattern, ranks[0]) + " " +
                                     std::to_string(v->elements_) + ": every rank needs as many");
    }
    if (v->data_.size() <= rank) v->data_.resize(rank + 1);
    v->data_[rank] = std::move(bytes);
  }
  return v;
}

void FileVectors::Read(uint16_t rank, uint32_t iteration, size_t first, size_t count,
                       uint8_t* out) const {
  std::memcpy(out, data_[rank].data() + first * element_size_, count * element_size_);
}

}  // namespace aggswitch::tools
