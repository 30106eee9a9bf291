#include "dataplane/path_decisions.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace aggswitch::dataplane {

common::Result<std::unique_ptr<const PathDecisions>> PathDecisions::Build(
    std::span<const PathDecision> decisions) {
  if (decisions.size() > kMaxDecisions) {
    return common::InvalidArgument("decisions: expected at most " + std::to_string(kMaxDecisions) +
                                   " decisions, got " + std::to_string(decisions.size()));
  }
  std::map<std::pair<uint32_t, uint8_t>, size_t> seen;
  bool has_length[33] = {};
  for (size_t i = 0; i < decisions.size(); ++i) {
    const common::Ipv4Prefix& p = decisions[i].dst;
    const std::string where = "decisions[" + std::to_string(i) + "].dst";
    if (p.length > 32) {
      return common::InvalidArgument(where + ": expected a prefix length 0..32, got " +
                                     std::to_string(p.length));
    }
    const uint32_t mask = p.length == 0 ? 0 : ~uint32_t{0} << (32 - p.length);
    if ((p.ip.addr & ~mask) != 0) {
      return common::InvalidArgument(where + ": expected a prefix without host bits, got " +
                                     p.ToString());
    }
    if (decisions[i].port == kNone) {
      return common::InvalidArgument("decisions[" + std::to_string(i) + "].port: expected a port");
    }
    if (auto [it, fresh] = seen.emplace(std::make_pair(p.ip.addr, p.length), i); !fresh) {
      return common::InvalidArgument(where + ": expected each destination once, got " +
                                     p.ToString() + " again (also decisions[" +
                                     std::to_string(it->second) + "])");
    }
    has_length[p.length] = true;
  }

  std::unique_ptr<PathDecisions> t(new PathDecisions());
  t->entries_.assign(decisions.begin(), decisions.end());
  for (int len = 32; len >= 0; --len) {
    if (has_length[len]) t->lengths_[t->n_lengths_++] = static_cast<uint8_t>(len);
  }
  size_t capacity = 2;
  while (capacity < 2 * decisions.size()) capacity *= 2;
  t->slots_.assign(capacity, Entry{});
  t->mask_ = static_cast<uint32_t>(capacity - 1);
  for (const PathDecision& d : decisions) {
    uint32_t s = t->Slot(d.dst.ip.addr, d.dst.length);
    uint32_t probe = 0;
    while (t->slots_[s].port != kNone) {
      s = (s + 1) & t->mask_;
      ++probe;
    }
    t->slots_[s] = Entry{d.dst.ip.addr, d.dst.length, d.port};
    t->max_probe_ = std::max(t->max_probe_, probe);
  }
  return std::unique_ptr<const PathDecisions>(std::move(t));
}

}  // namespace aggswitch::dataplane
