// The simulated world a scenario runs in: one clock, one queue of timed
// events, and the links that carry Ethernet frames between the switches'
// ports and the hosts, each direction with its own seeded loss,
// duplication, reordering and delay.
//
//   World world(seed);
//   Link link(world, &sink, faults, Mix(seed, kLink, id), id);
//   link.Send(frame.data(), frame.size());         // delivered to sink later, maybe
//   world.At(world.now() + 1'000'000, [&] { ... });
//   world.Run(limit_ns, [&] { return done; });
//
// Events at the same time run in the order they were scheduled, so a run is
// a function of the seed. Every delivery is folded into trace(), which two
// runs of one scenario must agree on bit for bit.
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "tests/sim/rng.h"
#include "tests/sim/sim_clock.h"

namespace aggswitch::sim {

using Frame = std::vector<uint8_t>;

// Where a link delivers its frames: a switch port, a host, a segment.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // `frame` arrives now.
  virtual void Receive(Frame frame) = 0;
};

// One direction of a link's faults.
struct LinkFaults {
  double loss = 0;
  double duplicate = 0;
  double reorder = 0;        // a frame is held back by up to reorder_ns more
  uint64_t delay_ns = 5'000;  // every frame's one-way delay
  uint64_t reorder_ns = 200'000;
  // While the link is down (LinkDown windows) every frame is lost.
  struct Window {
    uint64_t from_ns = 0;
    uint64_t until_ns = 0;
  };
  std::vector<Window> down;

  bool clean() const { return loss == 0 && duplicate == 0 && reorder == 0 && down.empty(); }
};

struct LinkCounters {
  uint64_t sent = 0, delivered = 0, lost = 0, duplicated = 0, reordered = 0;
};

class World;

class Link {
 public:
  Link(World& world, FrameSink* to, LinkFaults faults, uint64_t seed, uint64_t id);
  // Sends a copy of the frame towards the sink, as the faults allow.
  void Send(const uint8_t* data, size_t len);
  const LinkCounters& counters() const { return counters_; }
  const LinkFaults& faults() const { return faults_; }

 private:
  World& world_;
  FrameSink* to_;
  LinkFaults faults_;
  Rng rng_;
  uint64_t id_;
  uint64_t last_arrival_ = 0;  // frames in order unless reordered
  LinkCounters counters_;
};

class World {
 public:
  explicit World(uint64_t seed) : seed_(seed) {}

  SimClock& clock() { return clock_; }
  uint64_t now() const { return clock_.ns(); }
  uint64_t seed() const { return seed_; }

  // Runs `fn` at `at_ns` (now, when that has passed).
  void At(uint64_t at_ns, std::function<void()> fn);
  // Runs the events in time order until `done()` holds after an event, the
  // queue is empty, or the next event lies past `limit_ns`. Returns whether
  // `done()` held.
  bool Run(uint64_t limit_ns, const std::function<bool()>& done);

  // Drops every pending event (before the objects they refer to go).
  void Clear() { queue_ = {}; }
  // Prints every delivery (time, link, the frame's headers) to stderr.
  void set_print(bool on) { print_ = on; }
  // Folds a delivery into the trace.
  void Trace(uint64_t what, const uint8_t* data, size_t len);
  // Prints a frame a link lost (--frames); the trace hash leaves it out.
  void TraceLost(uint64_t what, const uint8_t* data, size_t len);
  uint64_t trace() const { return trace_; }
  uint64_t events() const { return events_; }

 private:
  struct Event {
    uint64_t at;
    uint64_t order;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  const uint64_t seed_;
  SimClock clock_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t order_ = 0;
  uint64_t events_ = 0;
  uint64_t trace_ = 0xcbf29ce484222325ULL;
  bool print_ = false;
};

}  // namespace aggswitch::sim
