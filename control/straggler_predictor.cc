#include "control/straggler_predictor.h"

#include <algorithm>

namespace aggswitch::control {

StragglerPredictor::StragglerPredictor(size_t history) : history_(std::max<size_t>(history, 1)) {}

void StragglerPredictor::Record(std::span<const MemberOffset> offsets,
                                std::span<const uint32_t> held) {
  // A held member repeats the figure it had over its own samples when it was
  // first held: its mean stays that figure.
  std::vector<MemberOffset> kept;
  for (const uint32_t node : held) {
    auto figure = held_.find(node);
    if (figure == held_.end()) {
      const auto it = offsets_.find(node);
      if (it == offsets_.end() || it->second.empty()) continue;
      double sum = 0;
      for (const auto& sample : it->second) sum += sample.second;
      figure = held_.emplace(node, sum / static_cast<double>(it->second.size())).first;
    }
    kept.push_back({node, figure->second});
  }
  const uint64_t op = next_op_++;
  recorded_ = std::min(recorded_ + 1, history_);
  for (const MemberOffset& m : offsets) {
    offsets_[m.node].emplace_back(op, m.offset_s);
    held_.erase(m.node);  // it takes part again
  }
  for (const MemberOffset& m : kept) offsets_[m.node].emplace_back(op, m.offset_s);
  // Forget what fell out of the history.
  const uint64_t oldest = next_op_ - recorded_;
  for (auto it = offsets_.begin(); it != offsets_.end();) {
    auto& series = it->second;
    while (!series.empty() && series.front().first < oldest) series.pop_front();
    it = series.empty() ? offsets_.erase(it) : std::next(it);
  }
}

std::vector<MemberOffset> StragglerPredictor::Ranked(size_t operations) const {
  const size_t window = operations == 0 ? recorded_ : std::min(operations, recorded_);
  const uint64_t first = next_op_ - window;
  std::vector<MemberOffset> ranked;
  for (const auto& [node, series] : offsets_) {
    double sum = 0;
    size_t n = 0;
    for (const auto& [op, offset] : series) {
      if (op < first) continue;
      sum += offset;
      ++n;
    }
    if (n > 0) ranked.push_back({node, sum / static_cast<double>(n)});
  }
  std::sort(ranked.begin(), ranked.end(), [](const MemberOffset& a, const MemberOffset& b) {
    return a.offset_s != b.offset_s ? a.offset_s > b.offset_s : a.node < b.node;
  });
  return ranked;
}

std::vector<MemberOffset> StragglerPredictor::TopK(size_t k, size_t operations) const {
  std::vector<MemberOffset> ranked = Ranked(operations);
  if (ranked.size() > k) ranked.resize(k);
  return ranked;
}

std::vector<MemberOffset> StragglerPredictor::Over(double seconds, size_t operations) const {
  std::vector<MemberOffset> ranked = Ranked(operations);
  std::erase_if(ranked, [&](const MemberOffset& m) { return !(m.offset_s > seconds); });
  return ranked;
}

}  // namespace aggswitch::control
