// An aggregation switch for the client's tests: one thread and one UDP socket
// on 127.0.0.1 (or bind_ip), reducing with the switch's own slot table and kernels
// (aggregator/slot_table.h, aggregator/reduce.h) and following its rules for
// jobs, task info, ACKs and NACKs (docs/aggregation.md): results go to each
// member's learned address, a retransmission after completion gets the
// retained result, a slot is freed only once every member's ack watermark has
// passed it. Received datagrams and sent results can be dropped or
// duplicated at random. The real switch, on real ports, is exercised by
// tests/system/allreduce_netns_test.sh.
//
//   TestSwitch sw({.jobs = {{.id = 7, .key = 0x5eed, .members = 4}}, .drop_in = 0.05});
//   ASSERT_TRUE(sw.ok());
//   options.switches = {sw.address()};
//   ... clients allreduce ...
//   EXPECT_EQ(sw.completed(), chunks);
//
// Thread safety: the constructor and destructor [test thread]; the counters
// and CompletedSeqs [any].
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client/client.h"

namespace aggswitch::client {

class TestSwitch {
 public:
  struct Job {
    uint32_t id = 0;
    uint64_t key = 0;
    uint16_t members = 0;
    uint16_t nodes = 1;
  };
  struct Options {
    std::vector<Job> jobs;  // known from the start, like the config's
    // The socket's address, in the network namespace of the thread that
    // constructs the switch.
    common::Ipv4Addr bind_ip{0x7f000001};
    bool in_band_registration = true;
    uint32_t slots = 1024;
    double drop_in = 0;        // probability that a received datagram is lost
    double drop_out = 0;       // probability that one member's copy of a result is lost
    double duplicate_out = 0;  // probability that one member's copy of a result is sent twice
    uint64_t seed = 1;
    // A predicted straggler: a contribution from this node without the
    // BYPASS flag is answered with a NOTICE to flag its data (the test
    // switch still reduces it). -1: none.
    int notice_node = -1;
    // Refuses the first `refuse_first` contributions (-1: every one) with
    // NACK `refuse_with`, as the switch refuses chunks over a quota.
    int refuse_first = 0;
    aggregator::NackReason refuse_with = aggregator::NackReason::kSlotQuota;
    // Loses the first `lose_first` contributions it receives, as a network
    // would, before anything else looks at them.
    int lose_first = 0;
    // Tells each member whose contribution it counts that its chunk moved
    // to spare slot `relocate_hint` (NOTICE relocated), as aggswitch does
    // after a collision, and counts the datagrams that carry the hint.
    // kNoSlotHint: never.
    uint16_t relocate_hint = aggregator::kNoSlotHint;
    // Results sent while more than `move_after` and at most `move_until`
    // chunks have completed carry the moved partition's slot hint
    // (kMovedSlotHint), as aggswitch's do for a job it moved; first
    // transmissions and the hint they carried are logged (FirstSends).
    uint64_t move_after = UINT64_MAX;
    uint64_t move_until = UINT64_MAX;
    // A sum that saturated is answered EXCEPTION_RETRANSMIT (the saturated
    // sum, flagged OVERFLOW), as a parameter node answers it, not RESULT
    // with OVERFLOW.
    bool exception_retransmit = false;
    // Every result says some member's data came in a retransmission
    // (flags::kRecovered), as aggswitch's do after a loss.
    bool flag_recovered = false;
  };

  explicit TestSwitch(const Options& options);
  ~TestSwitch();
  TestSwitch(const TestSwitch&) = delete;
  TestSwitch& operator=(const TestSwitch&) = delete;

  // Whether the socket and the thread are up.
  bool ok() const { return thread_.joinable(); }
  SwitchAddress address() const;

  uint64_t contributions() const { return contributions_.load(); }  // counted in a slot
  uint64_t completed() const { return completed_.load(); }          // chunks reduced
  uint64_t registrations() const { return registrations_.load(); }  // jobs added in band
  uint64_t task_infos() const { return task_infos_.load(); }        // announcements echoed
  uint64_t acks() const { return acks_.load(); }                    // ACK datagrams
  // The incarnations the members' datagrams carried, and the flags any
  // of them carried.
  std::set<uint32_t> incarnations() const {
    std::lock_guard<std::mutex> lock(log_mu_);
    return incarnations_;
  }
  uint16_t saw_flags() const { return saw_flags_.load(); }
  uint64_t nacks() const { return nacks_.load(); }
  // Contributions counted in a slot (not retransmissions) that carried the flag.
  uint64_t task_info_flags() const { return task_info_flags_.load(); }
  uint64_t ordered_flags() const { return ordered_flags_.load(); }
  uint64_t bypass_flags() const { return bypass_flags_.load(); }
  uint64_t notices() const { return notices_.load(); }
  // Retransmissions and QUERYs answered with a NOTICE "held": their slot
  // waits for others.
  uint64_t held_notices() const { return held_notices_.load(); }
  uint64_t queries() const { return queries_.load(); }  // QUERYs answered
  // Contributions received with the RETRANSMISSION flag, counted or not.
  uint64_t retransmissions() const { return retransmissions_.load(); }
  // Contributions received marked AGGREGATE_AT_PS (taken like any other
  // here), and those of them that carried task info, or whose `expected`
  // was not the job's member count.
  uint64_t for_parameter_node() const { return for_parameter_node_.load(); }
  uint64_t for_parameter_node_malformed() const { return for_parameter_node_malformed_.load(); }
  // With relocate_hint: NOTICEs relocated sent; contributions and QUERYs
  // that carried the hint; first transmissions (no RETRANSMISSION flag)
  // among the contributions that did.
  uint64_t relocated_notices() const { return relocated_notices_.load(); }
  uint64_t hinted() const { return hinted_.load(); }
  uint64_t first_sends_hinted() const { return first_sends_hinted_.load(); }
  // Every contribution received without the RETRANSMISSION flag, in
  // arrival order: its job, sequence number and slot hint.
  struct FirstSend {
    uint32_t job = 0;
    uint32_t seq = 0;
    uint16_t slot_hint = 0;
  };
  std::vector<FirstSend> FirstSends() const;
  // Sequence numbers of the completed chunks of `job`, in completion order.
  std::vector<uint32_t> CompletedSeqs(uint32_t job) const;
  // The offset (aux) each completed chunk of `job` carried, by sequence number.
  std::map<uint32_t, uint32_t> CompletedOffsets(uint32_t job) const;

 private:
  struct State;
  void Loop();

  std::unique_ptr<State> state_;
  common::Ipv4Addr bind_ip_;
  uint16_t port_ = 0;
  uint64_t refused_ = 0;  // Options::refuse_first so far [the switch's thread]
  uint64_t lost_ = 0;     // Options::lose_first so far [the switch's thread]
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> contributions_{0}, completed_{0}, registrations_{0}, task_infos_{0},
      acks_{0}, nacks_{0}, task_info_flags_{0}, ordered_flags_{0}, retransmissions_{0},
      bypass_flags_{0}, notices_{0}, held_notices_{0}, queries_{0}, relocated_notices_{0},
      hinted_{0}, first_sends_hinted_{0}, for_parameter_node_{0}, for_parameter_node_malformed_{0};
  mutable std::mutex log_mu_;
  struct Completed {
    uint32_t job = 0;
    uint32_t seq = 0;
    uint32_t elem_offset = 0;
  };
  std::vector<Completed> completed_log_;  // guarded by log_mu_
  std::set<uint32_t> incarnations_;       // guarded by log_mu_
  std::atomic<uint16_t> saw_flags_{0};
  std::vector<FirstSend> first_sends_;    // guarded by log_mu_
  std::thread thread_;
};

}  // namespace aggswitch::client
