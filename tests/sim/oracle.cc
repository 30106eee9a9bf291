#include "tests/sim/oracle.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "aggregator/half.h"
#include "client/chunking.h"
#include "client/fixed_point.h"
#include "client/internal/engine.h"

namespace aggswitch::sim {

namespace {

using aggregator::DType;
using aggregator::ReduceOp;

constexpr uint32_t kCanonicalNan = 0x7FC00000u;
// What an allreduce may take per window of chunks, beyond the scenario's
// bound: a few round trips of a three-level tree with its links' losses.
constexpr uint64_t kRoundAllowanceNs = 3'000'000;
// And, on lossy links, times the chance that one of the window's datagrams
// is lost: a rank learns of a lost datagram only at its retransmission
// timeout (a window of 47 one-element chunks of three ranks at 4.9% loss
// loses one nearly every round, and waits 150 to 250 ms for it).
constexpr uint64_t kLossyRoundNs = 250'000'000;

// --- The element semantics (docs/protocol.md, "Data types and operations") ---

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

float Widen(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return aggregator::HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return aggregator::BFloat16ToFloat(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

void Narrow(DType t, float v, uint8_t* out) {
  switch (t) {
    case DType::kFloat16: {
      const uint16_t h = aggregator::FloatToHalf(v);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t h = aggregator::FloatToBFloat16(v);
      std::memcpy(out, &h, 2);
      return;
    }
    default:
      std::memcpy(out, &v, 4);
  }
}

float Canon(float x) { return std::isnan(x) ? std::bit_cast<float>(kCanonicalNan) : x; }

float CombineFloat(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
      return Canon(a + b);
    case ReduceOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return std::bit_cast<float>(kCanonicalNan);
      if (a == 0 && b == 0) return std::signbit(a) ? a : b;
      return b < a ? b : a;
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return std::bit_cast<float>(kCanonicalNan);
      if (a == 0 && b == 0) return std::signbit(a) ? b : a;
      return b > a ? b : a;
    default:
      return a;
  }
}

// One switch's reduction of `n` elements (each `size` bytes, in member
// order) into `out`: the first loaded, the others folded in, the result
// stored back (a float32 comes back as sent when it is alone).
void ReduceMembers(DType t, ReduceOp op, const std::vector<const uint8_t*>& members, uint8_t* out) {
  if (t == DType::kInt32) {
    int64_t acc;
    int32_t v;
    std::memcpy(&v, members[0], 4);
    acc = v;
    for (size_t i = 1; i < members.size(); ++i) {
      std::memcpy(&v, members[i], 4);
      switch (op) {
        case ReduceOp::kSum: acc = std::clamp<int64_t>(acc + v, INT32_MIN, INT32_MAX); break;
        case ReduceOp::kMin: acc = std::min<int64_t>(acc, v); break;
        case ReduceOp::kMax: acc = std::max<int64_t>(acc, v); break;
        case ReduceOp::kAnd: acc = static_cast<int32_t>(acc) & v; break;
        case ReduceOp::kOr: acc = static_cast<int32_t>(acc) | v; break;
      }
    }
    const auto r = static_cast<int32_t>(acc);
    std::memcpy(out, &r, 4);
    return;
  }
  if (t == DType::kBool) {
    bool acc = members[0][0] != 0;
    for (size_t i = 1; i < members.size(); ++i) {
      const bool b = members[i][0] != 0;
      acc = op == ReduceOp::kAnd ? (acc && b) : (acc || b);
    }
    out[0] = acc ? 1 : 0;
    return;
  }
  float acc = Widen(t, members[0]);
  for (size_t i = 1; i < members.size(); ++i) acc = CombineFloat(op, acc, Widen(t, members[i]));
  Narrow(t, acc, out);
}

// --- The orders a sum may be reduced in ---

// Element `e` of every rank, reduced as the job's tree reduces it: each
// switch its members in member order.
void TreeOrder(const JobTree& tree, int sw, DType t, ReduceOp op, const std::vector<const uint8_t*>& elem,
               uint8_t* out) {
  const JobTree::Node& node = tree.at.at(sw);
  const size_t size = aggregator::ElementSize(t);
  std::vector<std::vector<uint8_t>> partials(node.children.size(), std::vector<uint8_t>(size));
  std::vector<const uint8_t*> members;
  for (uint16_t r : node.ranks) members.push_back(elem[r]);
  for (size_t c = 0; c < node.children.size(); ++c) {
    TreeOrder(tree, node.children[c], t, op, elem, partials[c].data());
    members.push_back(partials[c].data());
  }
  ReduceMembers(t, op, members, out);
}

// Rank order: what the parameter node does with data it reduces itself.
void RankOrder(DType t, ReduceOp op, const std::vector<const uint8_t*>& elem, uint8_t* out) {
  ReduceMembers(t, op, elem, out);
}

// --- What a job's results may be ---

struct JobTraits {
  bool timers = false;       // a slot timer somewhere in its tree
  bool tan = false;          // its root has a TAN: conflicts and timeouts may go there
  bool param_node = false;   // data may be reduced at the parameter node
  bool ordered_exact = false;  // ordered sums keep the tree's order
};

JobTraits TraitsOf(const Scenario& s, const JobSpecSim& j, const JobTree& tree) {
  JobTraits t;
  if (j.origin == Origin::kInBand) {
    for (const auto& [sw, node] : tree.at) t.timers |= s.switches[sw].timeout_ms > 0;
  } else {
    t.timers = j.timeout_ms > 0;
  }
  t.tan = j.tan != SwitchSpec::Tan::kNone;
  t.param_node = j.tan == SwitchSpec::Tan::kRemote;
  t.ordered_exact = !t.timers && !t.tan && !j.resend_to_parameter_node;
  return t;
}

double Epsilon(DType t) {
  switch (t) {
    case DType::kFloat16: return std::ldexp(1.0, -11);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

double MaxFinite(DType t) {
  switch (t) {
    case DType::kFloat16: return 65504.0;
    default: return std::numeric_limits<float>::max();
  }
}

std::string Hex(const uint8_t* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = n; i-- > 0;) {
    std::snprintf(buf, sizeof(buf), "%02x", p[i]);
    s += buf;
  }
  return s;
}

std::string Show(DType t, const uint8_t* p) {
  char buf[64];
  switch (t) {
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof(buf), "%" PRId32, v);
      return buf;
    }
    case DType::kBool:
      return std::to_string(p[0]);
    default:
      std::snprintf(buf, sizeof(buf), "%.9g (0x%s)", static_cast<double>(Widen(t, p)),
                    Hex(p, aggregator::ElementSize(t)).c_str());
      return buf;
  }
}

// A float sum of `elem`, exactly (in long double), its specials apart, and
// how far from it any order of summing in `t` may round, through a tree of
// `depth` levels.
struct SumEstimate {
  bool nan = false, pos_inf = false, neg_inf = false;
  long double sum = 0, abs_sum = 0, pos = 0, neg = 0;
  long double bound = 0;
};

SumEstimate Estimate(DType t, const std::vector<const uint8_t*>& elem, size_t depth) {
  SumEstimate e;
  for (const uint8_t* p : elem) {
    const float v = Widen(t, p);
    if (std::isnan(v)) e.nan = true;
    else if (std::isinf(v)) (v > 0 ? e.pos_inf : e.neg_inf) = true;
    else {
      e.sum += v;
      e.abs_sum += std::fabs(v);
      (v > 0 ? e.pos : e.neg) += v;
    }
  }
  e.bound = Epsilon(t) * (static_cast<long double>(elem.size()) + 2.0L * depth + 2) * e.abs_sum +
            (t == DType::kFloat16 ? std::ldexp(1.0, -24) : std::numeric_limits<float>::denorm_min());
  return e;
}

// Whether `got` is within the rounding of a float sum of `elem` in some order.
bool WithinRounding(DType t, const std::vector<const uint8_t*>& elem, const uint8_t* got, size_t depth,
                    std::string* why) {
  const SumEstimate est = Estimate(t, elem, depth);
  const bool nan = est.nan, pos_inf = est.pos_inf, neg_inf = est.neg_inf;
  const long double sum = est.sum, pos = est.pos, neg = est.neg;
  const float g = Widen(t, got);
  if (nan) {
    if (std::isnan(g)) return true;
    *why = "expected NaN";
    return false;
  }
  // Some order may overflow on the way (a partial sum beyond the type's
  // range becomes an infinity, and one of the other sign then NaN): then
  // any value can come out.
  if (pos >= MaxFinite(t) / 2 || -neg >= MaxFinite(t) / 2) return true;
  if (pos_inf && neg_inf) {
    if (std::isnan(g)) return true;
    *why = "expected NaN";
    return false;
  }
  if (pos_inf || neg_inf) {
    if (std::isinf(g) && (g > 0) == pos_inf) return true;
    *why = pos_inf ? "expected +Inf" : "expected -Inf";
    return false;
  }
  const long double bound = est.bound;
  if (std::isfinite(g) && std::fabs(static_cast<long double>(g) - sum) <= bound) return true;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "expected %.9Lg within %.3Lg", sum, bound);
  *why = buf;
  return false;
}

// The ways one chunk of a float sum may have gone, each giving its bytes.
struct Candidate {
  const char* name;
  std::vector<uint8_t> bytes;
};

size_t TreeDepth(const JobTree& tree, int sw) {
  size_t d = 0;
  for (int c : tree.at.at(sw).children) d = std::max(d, TreeDepth(tree, c));
  return d + 1;
}

}  // namespace

void JudgeOp(const OpView& v, std::vector<std::string>* findings) {
  const Scenario& s = *v.scenario;
  const JobSpecSim& j = s.jobs[v.job];
  const OpSpec& spec = j.ops[v.op];
  const uint32_t world = j.ranks();
  const JobTree tree = TreeOf(s, v.job);
  const JobTraits traits = TraitsOf(s, j, tree);
  const DType t = spec.dtype;
  const size_t size = aggregator::ElementSize(t);
  const uint32_t n = spec.count;
  char where[96];
  std::snprintf(where, sizeof(where), "job %u run %u op %u (%s %s x%u)", j.id, v.run, v.op,
                std::string(aggregator::DTypeName(t)).c_str(),
                std::string(aggregator::ReduceOpName(spec.op)).c_str(), n);
  const auto report = [&](const std::string& what) { findings->push_back(std::string(where) + ": " + what); };

  // The client's options, as the runner gives them (chunking follows them).
  client::ClientOptions options;
  options.world = static_cast<uint16_t>(world);
  options.max_chunk_elements = j.max_chunk_elements;
  options.float_mode = j.float_mode;
  options.headroom = j.headroom;

  std::vector<const uint8_t*> elem(world);
  const auto element_of = [&](uint32_t e) {
    for (uint32_t r = 0; r < world; ++r) elem[r] = v.inputs[r].data() + size_t{e} * size;
  };

  // What may come back, chunk by chunk: a list of candidates per chunk (the
  // bytes of the chunk's elements), or for inexact sums a rounding check.
  const bool int_sum = t == DType::kInt32 && spec.op == ReduceOp::kSum;
  const bool float_sum = IsFloat(t) && spec.op == ReduceOp::kSum;
  bool may_saturate = false;  // an int32 sum that some order saturates
  bool must_saturate = false;  // one whose true value leaves int32
  std::vector<uint8_t> exact(size_t{n} * size);  // integers, bools, float min/max
  for (uint32_t e = 0; e < n; ++e) {
    element_of(e);
    if (int_sum) {
      int64_t pos = 0, neg = 0;
      for (const uint8_t* p : elem) {
        int32_t x;
        std::memcpy(&x, p, 4);
        (x > 0 ? pos : neg) += x;
      }
      may_saturate |= pos > INT32_MAX || neg < INT32_MIN;
      must_saturate |= pos + neg > INT32_MAX || pos + neg < INT32_MIN;
      const auto r = static_cast<int32_t>(std::clamp<int64_t>(pos + neg, INT32_MIN, INT32_MAX));
      std::memcpy(&exact[size_t{e} * 4], &r, 4);
    } else if (!float_sum) {
      TreeOrder(tree, tree.root, t, spec.op, elem, &exact[size_t{e} * size]);
    }
  }

  // Float sums: per chunk, the candidates.
  struct FloatPlan {
    uint32_t per_chunk = 1;
    bool fixed = false;        // fixed point, with scale:
    int8_t scale = 0;
    bool ordered = false;      // reduced in order through the switches
  } plan;
  if (float_sum) {
    if (t == DType::kFloat32 && j.float_mode == client::FloatMode::kFixedPoint) {
      int32_t max_exp = INT32_MIN;
      for (uint32_t r = 0; r < world; ++r) {
        max_exp = std::max(max_exp, client::MaxExponent({reinterpret_cast<const float*>(v.inputs[r].data()), n}));
      }
      const std::optional<int8_t> scale =
          client::FixedPointScale(max_exp, j.headroom.value_or(client::DefaultHeadroom(world)));
      plan.fixed = scale.has_value();
      plan.scale = scale.value_or(0);
      plan.ordered = true;  // the redo, and the fallback without a scale
      plan.per_chunk = client::internal::ChunkElementsFor(options, plan.fixed ? DType::kInt32 : DType::kFloat32);
    } else {
      plan.ordered = j.float_mode != client::FloatMode::kFloat;
      plan.per_chunk = client::internal::ChunkElementsFor(options, t);
    }
  }
  // The time the allreduce may take: the scenario's bound, plus a round
  // trip's allowance for every window of chunks past the first (an
  // allreduce of many small chunks through a narrow window takes that many
  // round trips, each with its share of the links' losses; a stall still
  // meets the ranks' progress timeout).
  const uint32_t per_chunk_any = client::internal::ChunkElementsFor(options, t);
  const uint64_t chunks = (uint64_t{n} + per_chunk_any - 1) / std::max<uint32_t>(per_chunk_any, 1);
  const uint64_t rounds = (chunks + j.window - 1) / std::max<uint32_t>(j.window, 1);
  const size_t depth = TreeDepth(tree, tree.root);
  // A window's datagrams: each rank's chunk up and its result down, over
  // every level of the tree.
  const double per_round = static_cast<double>(std::min<uint64_t>(chunks, j.window)) *
                           static_cast<double>(world) * 2.0 * static_cast<double>(depth);
  const double lossy = 1.0 - std::pow(1.0 - s.links.loss, per_round);
  const uint64_t round_ns = kRoundAllowanceNs + static_cast<uint64_t>(lossy * kLossyRoundNs);
  const uint64_t op_bound_ns = s.op_bound_ns + (rounds > 1 ? rounds - 1 : 0) * round_ns;
  // A parameter-server job's gradient: agg-ps answers with its parameters.
  const bool sgd = j.learning_rate > 0 && float_sum && t == DType::kFloat32;
  // Whether element e of `got` is the parameters after the step.
  const auto sgd_step = [&](uint32_t e, const uint8_t* got, std::string* why) {
    if (e < v.known.size() && !v.known[e]) return true;
    element_of(e);
    const SumEstimate grad = Estimate(t, elem, depth);
    const long double before = e < v.params.size() ? v.params[e] : 0.0f;
    const long double rate = j.learning_rate;
    const long double want = before - rate * grad.sum;
    // The sum's rounding, scaled, then the product's and the difference's.
    const long double bound = rate * grad.bound +
                              2 * Epsilon(t) * (std::fabs(before) + std::fabs(rate * grad.sum) + std::fabs(want)) +
                              4 * static_cast<long double>(std::numeric_limits<float>::denorm_min());
    const float g = Widen(t, got);
    if (std::isfinite(g) && std::fabs(static_cast<long double>(g) - want) <= bound) return true;
    char buf[200];
    std::snprintf(buf, sizeof(buf), "expected the parameters %.9Lg - %.9Lg * %.9Lg = %.9Lg within %.3Lg", before,
                  rate, grad.sum, want, bound);
    *why = buf;
    return false;
  };

  // Checks one rank's bytes, or of a partial copy the chunks it has
  // (`have`, by chunks of `per_chunk` elements).
  const auto check = [&](const std::string& who, const std::vector<uint8_t>& got,
                         const std::vector<bool>* have = nullptr, uint32_t per_chunk = 1) -> bool {
    if (got.size() != size_t{n} * size) {
      report(who + " got " + std::to_string(got.size()) + " bytes");
      return false;
    }
    const auto has = [&](uint32_t e) { return have == nullptr || (*have)[e / per_chunk]; };
    if (!float_sum) {
      for (uint32_t e = 0; e < n; ++e) {
        if (!has(e)) continue;
        const uint8_t* g = &got[size_t{e} * size];
        const uint8_t* x = &exact[size_t{e} * size];
        const bool both_nan = IsFloat(t) && std::isnan(Widen(t, g)) && std::isnan(Widen(t, x));
        if (std::memcmp(g, x, size) != 0 && !both_nan) {
          element_of(e);
          std::string inputs;
          for (uint32_t r = 0; r < world; ++r) inputs += (r ? ", " : "") + Show(t, elem[r]);
          report(who + " element " + std::to_string(e) + ": got " + Show(t, g) + ", expected " + Show(t, x) +
                 " (the ranks sent " + inputs + ")");
          return false;
        }
      }
      return true;
    }
    if (sgd) {
      for (uint32_t e = 0; e < n; ++e) {
        std::string why;
        if (!has(e) || sgd_step(e, &got[size_t{e} * size], &why)) continue;
        std::string inputs;
        for (uint32_t r = 0; r < world; ++r) inputs += (r ? ", " : "") + Show(t, elem[r]);
        report(who + " element " + std::to_string(e) + ": got " + Show(t, &got[size_t{e} * size]) + ", " + why +
               " (the ranks sent " + inputs + ")");
        return false;
      }
      return true;
    }
    for (uint32_t first = 0; first < n; first += plan.per_chunk) {
      const uint32_t last = std::min(n, first + plan.per_chunk);
      if (!has(first)) continue;
      std::vector<Candidate> candidates;
      bool rounding = false;  // also any sum within rounding
      if (plan.fixed) {
        // The exact fixed-point sum, unless it saturates (then the redo).
        Candidate fixed{"fixed point", std::vector<uint8_t>(size_t{last - first} * 4)};
        bool fits = true, can_saturate = false;
        for (uint32_t e = first; e < last; ++e) {
          element_of(e);
          int64_t pos = 0, neg = 0;
          for (const uint8_t* p : elem) {
            float x;
            std::memcpy(&x, p, 4);
            const int32_t q = client::ToFixed(x, plan.scale);
            (q > 0 ? pos : neg) += q;
          }
          fits &= pos + neg >= INT32_MIN && pos + neg <= INT32_MAX;
          can_saturate |= pos > INT32_MAX || neg < INT32_MIN;
          const float r = client::FromFixed(static_cast<int32_t>(std::clamp<int64_t>(pos + neg, INT32_MIN, INT32_MAX)),
                                            plan.scale);
          std::memcpy(&fixed.bytes[size_t{e - first} * 4], &r, 4);
        }
        if (fits) candidates.push_back(std::move(fixed));
        if (!can_saturate) goto judge;  // no order saturates it: only the fixed sum
      }
      if (plan.ordered) {
        Candidate in_tree{"the tree's order", std::vector<uint8_t>(size_t{last - first} * size)};
        Candidate by_rank{"rank order", std::vector<uint8_t>(size_t{last - first} * size)};
        for (uint32_t e = first; e < last; ++e) {
          element_of(e);
          TreeOrder(tree, tree.root, t, ReduceOp::kSum, elem, &in_tree.bytes[size_t{e - first} * size]);
          RankOrder(t, ReduceOp::kSum, elem, &by_rank.bytes[size_t{e - first} * size]);
        }
        candidates.push_back(std::move(in_tree));
        if (traits.param_node) candidates.push_back(std::move(by_rank));
        rounding = !traits.ordered_exact;
      } else {
        rounding = true;
      }
    judge:
      bool matched = false;
      for (const Candidate& c : candidates) {
        bool same = true;
        for (uint32_t e = first; e < last && same; ++e) {
          const uint8_t* g = &got[size_t{e} * size];
          const uint8_t* x = &c.bytes[size_t{e - first} * size];
          same = std::memcmp(g, x, size) == 0 || (std::isnan(Widen(t, g)) && std::isnan(Widen(t, x)));
        }
        matched |= same;
      }
      if (!matched && rounding) {
        matched = true;
        for (uint32_t e = first; e < last && matched; ++e) {
          element_of(e);
          std::string why;
          if (!WithinRounding(t, elem, &got[size_t{e} * size], depth, &why)) {
            // The ranks' values, to tell whose data is missing or counted twice.
            std::string inputs;
            for (uint32_t r = 0; r < world; ++r) inputs += (r ? ", " : "") + Show(t, elem[r]);
            report(who + " element " + std::to_string(e) + ": got " + Show(t, &got[size_t{e} * size]) + ", " +
                   why + " (the ranks sent " + inputs + ")");
            return false;
          }
        }
      }
      if (!matched) {
        std::string what = who + " chunk of elements " + std::to_string(first) +
                           ".." + std::to_string(last - 1) + " matches none of:";
        for (const Candidate& c : candidates) {
          // The first element that differs.
          for (uint32_t e = first; e < last; ++e) {
            if (std::memcmp(&got[size_t{e} * size], &c.bytes[size_t{e - first} * size], size) != 0) {
              what += std::string(" ") + c.name + " (element " + std::to_string(e) + ": got " +
                      Show(t, &got[size_t{e} * size]) + ", expected " + Show(t, &c.bytes[size_t{e - first} * size]) + ")";
              break;
            }
          }
        }
        report(what);
        return false;
      }
    }
    return true;
  };

  const std::vector<uint8_t>* first_ok = nullptr;
  for (uint32_t r = 0; r < world; ++r) {
    const OpOutcome* o = v.outcomes[r];
    if (o == nullptr || !o->ran) continue;
    if (o->code == common::StatusCode::kOk) {
      if (int_sum && must_saturate) {
        report("rank " + std::to_string(r) + " succeeded, but the int32 sum leaves the int32 range");
        continue;
      }
      if (!check("rank " + std::to_string(r), o->data)) continue;
      if (first_ok != nullptr && *first_ok != o->data) {
        report("rank " + std::to_string(r) + " got other bytes than another rank");
      }
      first_ok = &o->data;
      if (o->end_ns - o->start_ns > op_bound_ns && v.excuse.empty()) {
        report("rank " + std::to_string(r) + " took " + std::to_string((o->end_ns - o->start_ns) / 1'000'000) +
               " ms, over the scenario's bound");
      }
      continue;
    }
    if (o->code == common::StatusCode::kOutOfRange && int_sum && may_saturate) continue;
    if (!v.excuse.empty()) continue;
    report("rank " + std::to_string(r) + " failed (" + common::StatusCodeName(o->code) + "): " + o->message);
  }
  // A rank whose int32 sum overflowed holds clamped values where it did.
  const std::vector<uint8_t>* first_result = first_ok;
  for (uint32_t r = 0; r < world && first_result == nullptr; ++r) {
    const OpOutcome* o = v.outcomes[r];
    if (o != nullptr && o->ran && o->code == common::StatusCode::kOutOfRange && int_sum) first_result = &o->data;
  }
  for (const OpView::Partial& p : v.partials) {
    // A chunk flagged OVERFLOW says its int32 sum saturated: its values are
    // what some order clamped to, not judged but for the flag.
    std::vector<bool> judged = p.have;
    for (size_t c = 0; c < p.have.size(); ++c) judged[c] = p.have[c] && !(int_sum && (p.flags[c] & aggregator::flags::kOverflow) != 0);
    if (!check(p.who, p.data, &judged, p.per_chunk)) continue;
    for (size_t c = 0; c < p.have.size(); ++c) {
      if (!p.have[c]) continue;
      const size_t from = c * p.per_chunk * size;
      const size_t to = std::min<size_t>(n, (c + 1) * p.per_chunk) * size;
      if (first_result != nullptr && !std::equal(p.data.begin() + from, p.data.begin() + to, first_result->begin() + from)) {
        report(p.who + " chunk " + std::to_string(c) + ": other bytes than the ranks got");
      }
      // OVERFLOW where the int32 sum left the range, and only where some
      // order saturates it.
      bool leaves = false, can = false;
      for (uint32_t e = static_cast<uint32_t>(c * p.per_chunk); int_sum && e < std::min<size_t>(n, (c + 1) * p.per_chunk); ++e) {
        element_of(e);
        int64_t pos = 0, neg = 0;
        for (const uint8_t* q : elem) {
          int32_t x;
          std::memcpy(&x, q, 4);
          (x > 0 ? pos : neg) += x;
        }
        leaves |= pos + neg > INT32_MAX || pos + neg < INT32_MIN;
        can |= pos > INT32_MAX || neg < INT32_MIN;
      }
      const bool flagged = (p.flags[c] & aggregator::flags::kOverflow) != 0;
      if (leaves && !flagged) report(p.who + " chunk " + std::to_string(c) + ": a saturated int32 sum without OVERFLOW");
      if (flagged && !can) report(p.who + " chunk " + std::to_string(c) + ": OVERFLOW on a sum no order saturates");
    }
  }
}

}  // namespace aggswitch::sim
