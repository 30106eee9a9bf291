#include "aggregator/job_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "aggregator/slot_placement.h"

namespace aggswitch::aggregator {
namespace {

using common::StatusCode;

JobSpec Spec(uint32_t id, uint16_t members = 4, uint64_t key = 0) {
  JobSpec spec;
  spec.id = id;
  spec.key = key != 0 ? key : 0xfeed000000000000ull | id;
  spec.members = members;
  return spec;
}

std::unique_ptr<JobTable> MakeTable(uint32_t max_jobs = 16, uint16_t max_fan_in = 256) {
  auto table = JobTable::Create(max_jobs, max_fan_in);
  EXPECT_TRUE(table.ok()) << table.status().ToString();
  return std::move(table).value();
}

TEST(JobTableTest, CreateRejectsBadBounds) {
  EXPECT_EQ(JobTable::Create(0, 256).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JobTable::Create(65537, 256).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JobTable::Create(16, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JobTable::Create(16, 1025).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(JobTable::Create(65536, 1024).ok());
  EXPECT_TRUE(JobTable::Create(1, 1).ok());
}

TEST(JobTableTest, AddFindRemove) {
  auto table = MakeTable();
  EXPECT_EQ(table->Find(7), nullptr);
  JobSpec spec = Spec(7, 8);
  spec.nodes = 3;
  spec.ordered = true;
  spec.origin = JobSpec::Origin::kApi;
  auto added = table->Add(spec);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  const Job* job = table->Find(7);
  ASSERT_EQ(job, *added);
  EXPECT_EQ(job->id(), 7u);
  EXPECT_EQ(job->key(), spec.key);
  EXPECT_EQ(job->members(), 8);
  EXPECT_EQ(job->nodes(), 3);
  EXPECT_TRUE(job->ordered());
  EXPECT_EQ(job->origin(), JobSpec::Origin::kApi);
  EXPECT_EQ(job->index(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(job) % 64, 0u);
  EXPECT_EQ(table->size(), 1u);
  EXPECT_EQ(table->Find(8), nullptr);

  ASSERT_TRUE(table->Remove(7).ok());
  EXPECT_EQ(table->Find(7), nullptr);
  EXPECT_EQ(table->size(), 0u);
  EXPECT_EQ(table->Remove(7).code(), StatusCode::kNotFound);
  EXPECT_EQ(table->pending_reclaim(), 1u);
  EXPECT_EQ(table->Reclaim(), 1u);  // no reader registered: nothing to wait for
  EXPECT_EQ(table->pending_reclaim(), 0u);
}

// Which child switch covers a rank: what a switch asks of late data from
// below. A member (a rank here, or a child switch that covers itself) is
// covered by nobody, and so is an id no child names.
TEST(JobTableTest, CoveringChildNamesTheChildSwitchOfARank) {
  auto table = MakeTable();
  JobSpec spec = Spec(7, 3);
  spec.member_nodes = {2, 100, 101};
  spec.covers = {{}, {0, 1, 100}, {3, 4}};
  auto added = table->Add(spec);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  const Job& job = **added;
  EXPECT_EQ(job.CoveringChild(0), 1);
  EXPECT_EQ(job.CoveringChild(1), 1);
  EXPECT_EQ(job.CoveringChild(3), 2);
  EXPECT_EQ(job.CoveringChild(4), 2);
  EXPECT_EQ(job.CoveringChild(2), -1);    // a rank here
  EXPECT_EQ(job.CoveringChild(100), -1);  // the child itself
  EXPECT_EQ(job.CoveringChild(5), -1);    // nobody's
  const Job* flat = *table->Add(Spec(8, 4));
  EXPECT_EQ(flat->CoveringChild(0), -1);
}

TEST(JobTableTest, RejectsDuplicatesAndBadSpecs) {
  auto table = MakeTable(16, 8);
  ASSERT_TRUE(table->Add(Spec(1)).ok());
  auto dup = table->Add(Spec(1, 2, 99));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.status().message(), "job 1 already exists");
  EXPECT_EQ(table->Add(Spec(0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Add(Spec(2, 0)).status().code(), StatusCode::kInvalidArgument);
  auto wide = table->Add(Spec(2, 9));
  EXPECT_EQ(wide.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wide.status().message().find("1..8"), std::string::npos) << wide.status().message();
  JobSpec no_nodes = Spec(3);
  no_nodes.nodes = 0;
  EXPECT_EQ(table->Add(no_nodes).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(table->Add(Spec(2, 8)).ok());
  EXPECT_EQ(table->size(), 2u);
}

TEST(JobTableTest, FullTableIsResourceExhausted) {
  auto table = MakeTable(4);
  for (uint32_t id = 1; id <= 4; ++id) ASSERT_TRUE(table->Add(Spec(id)).ok());
  auto full = table->Add(Spec(5));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("4 of 4"), std::string::npos) << full.status().message();
  // A removed job frees its place once reclaimed (Add reclaims by itself).
  ASSERT_TRUE(table->Remove(2).ok());
  EXPECT_TRUE(table->Add(Spec(5)).ok());
}

TEST(JobTableTest, IndexIsReusedOnlyAfterReclaim) {
  auto table = MakeTable(4);
  auto reader = table->RegisterReader();
  ASSERT_TRUE(reader.ok());
  table->ReaderOnline(*reader);
  for (uint32_t id = 1; id <= 4; ++id) ASSERT_TRUE(table->Add(Spec(id)).ok());
  EXPECT_EQ(table->Find(3)->index(), 2);
  const Job* held = table->Find(3);  // the reader holds job 3
  ASSERT_TRUE(table->Remove(3).ok());

  // The reader has not passed a quiescent point: job 3 and index 2 stay.
  EXPECT_EQ(table->Reclaim(), 0u);
  EXPECT_EQ(table->pending_reclaim(), 1u);
  EXPECT_EQ(held->id(), 3u);
  auto full = table->Add(Spec(10));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("waiting for the workers"), std::string::npos)
      << full.status().message();

  table->Quiescent(*reader);
  EXPECT_EQ(table->Reclaim(), 1u);
  auto reused = table->Add(Spec(10));
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ((*reused)->index(), 2);
  table->ReaderOffline(*reader);
}

TEST(JobTableTest, EveryAddIsANewGeneration) {
  auto table = MakeTable(4);
  auto first = table->Add(Spec(7));
  ASSERT_TRUE(first.ok());
  const uint32_t g1 = (*first)->generation();
  const uint16_t index = (*first)->index();
  ASSERT_TRUE(table->Remove(7).ok());
  EXPECT_EQ(table->Reclaim(), 1u);  // no readers: reclaimed at once
  auto again = table->Add(Spec(7));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->index(), index) << "the same index is reused";
  EXPECT_NE((*again)->generation(), g1) << "but it is another generation";
  auto other = table->Add(Spec(8));
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->generation(), (*again)->generation());
  EXPECT_NE((*other)->generation(), g1);
}

TEST(JobTableTest, OfflineReaderDoesNotHoldBackReclaim) {
  auto table = MakeTable();
  auto reader = table->RegisterReader();
  ASSERT_TRUE(reader.ok());
  table->ReaderOnline(*reader);
  table->ReaderOffline(*reader);
  ASSERT_TRUE(table->Add(Spec(1)).ok());
  ASSERT_TRUE(table->Remove(1).ok());
  EXPECT_EQ(table->Reclaim(), 1u);
}

TEST(JobTableTest, LowestFreeIndexFirst) {
  auto table = MakeTable(8);
  for (uint32_t id = 100; id < 104; ++id) ASSERT_TRUE(table->Add(Spec(id)).ok());
  ASSERT_TRUE(table->Remove(102).ok());
  ASSERT_TRUE(table->Remove(100).ok());
  table->Reclaim();
  EXPECT_EQ((*table->Add(Spec(200)))->index(), 0);
  EXPECT_EQ((*table->Add(Spec(201)))->index(), 2);
  EXPECT_EQ((*table->Add(Spec(202)))->index(), 4);
}

TEST(JobTableTest, RegisterReaderRunsOut) {
  auto table = JobTable::Create(4, 4, /*max_readers=*/2);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(*(*table)->RegisterReader(), 0u);
  EXPECT_EQ(*(*table)->RegisterReader(), 1u);
  EXPECT_EQ((*table)->RegisterReader().status().code(), StatusCode::kResourceExhausted);
}

// Many adds and removes of colliding ids: tombstones never hide a job, and
// compaction keeps every live job reachable.
TEST(JobTableTest, ChurnKeepsEveryJobReachable) {
  auto table = MakeTable(64);
  std::mt19937 rng(1);
  std::set<uint32_t> live;
  for (int step = 0; step < 20000; ++step) {
    const uint32_t id = 1 + rng() % 200;
    if (live.count(id) != 0) {
      ASSERT_TRUE(table->Remove(id).ok());
      live.erase(id);
    } else {
      auto added = table->Add(Spec(id));
      if (live.size() < 64) {
        ASSERT_TRUE(added.ok()) << step << ": " << added.status().ToString();
        live.insert(id);
      } else {
        ASSERT_EQ(added.status().code(), StatusCode::kResourceExhausted);
      }
    }
    if (step % 7 == 0) table->Reclaim();
    if (step % 997 == 0) {
      for (uint32_t probe = 1; probe <= 200; ++probe) {
        const Job* job = table->Find(probe);
        ASSERT_EQ(job != nullptr, live.count(probe) != 0) << probe;
        if (job != nullptr) {
          ASSERT_EQ(job->id(), probe);
        }
      }
    }
  }
  EXPECT_EQ(table->size(), live.size());
  std::set<uint32_t> seen;
  std::set<uint16_t> indices;
  table->ForEach([&](const Job& job) {
    seen.insert(job.id());
    indices.insert(job.index());
  });
  EXPECT_EQ(seen, live);
  EXPECT_EQ(indices.size(), live.size());
  for (uint16_t index : indices) EXPECT_LT(index, 64);
}

TEST(JobTableTest, OriginNames) {
  EXPECT_EQ(OriginName(JobSpec::Origin::kConfig), "config");
  EXPECT_EQ(OriginName(JobSpec::Origin::kApi), "api");
  EXPECT_EQ(OriginName(JobSpec::Origin::kInBand), "in-band");
}

MemberAddr Addr(uint64_t mac48, uint8_t port, uint16_t vlan, uint32_t ip, uint16_t udp_port) {
  MemberAddr a;
  a.mac48 = mac48;
  a.port_index = port;
  a.vlan = vlan;
  a.ip = ip;
  a.udp_port = udp_port;
  return a;
}

TEST(JobTest, FirstDatagramBindsTheMember) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 3));
  MemberAddr addr;
  EXPECT_FALSE(job->GetMember(0, &addr));
  EXPECT_FALSE(job->LastSeen(1));
  EXPECT_EQ(job->LearnedMembers(), 0);

  const MemberAddr a = Addr(0x02aabbccddeeull, 5, 10, 0x0a000a01, 40001);
  EXPECT_EQ(job->BindMember(1, a, 0, 100, 0), Job::Bind::kBound);
  ASSERT_TRUE(job->GetMember(1, &addr));
  EXPECT_EQ(addr.mac48, 0x02aabbccddeeull);
  EXPECT_EQ(addr.port_index, 5);
  EXPECT_EQ(addr.vlan, 10);
  EXPECT_EQ(addr.ip, 0x0a000a01u);
  EXPECT_EQ(addr.udp_port, 40001);
  EXPECT_EQ(job->LearnedMembers(), 1);
  EXPECT_EQ(job->LastSeen(1), 100u);
  // The same address again: known, and seen later.
  EXPECT_EQ(job->BindMember(1, a, 0, 105, 0), Job::Bind::kKnown);
  EXPECT_EQ(job->LastSeen(1), 105u);
  // Extreme values survive the packing.
  EXPECT_EQ(job->BindMember(2, Addr(0xffffffffffffull, 255, 4094, 0xffffffff, 65535), 0, 1, 0),
            Job::Bind::kBound);
  ASSERT_TRUE(job->GetMember(2, &addr));
  EXPECT_EQ(addr.mac48, 0xffffffffffffull);
  EXPECT_EQ(addr.port_index, 255);
  EXPECT_EQ(addr.vlan, 4094);
  EXPECT_EQ(addr.ip, 0xffffffffu);
  EXPECT_EQ(addr.udp_port, 65535);
  // Untagged (VLAN 0) and all-zero addresses bind too.
  EXPECT_EQ(job->BindMember(0, Addr(0, 0, 0, 0, 0), 0, 1, 0), Job::Bind::kBound);
  ASSERT_TRUE(job->GetMember(0, &addr));
  EXPECT_EQ(addr.mac48, 0u);
  EXPECT_EQ(job->LearnedMembers(), 3);

  // Out-of-range members are ignored.
  EXPECT_FALSE(job->GetMember(3, &addr));
  EXPECT_FALSE(job->UpdateAck(3, 1));
  EXPECT_FALSE(job->GetAck(3));
}

// A member's first watermark since it was bound stays while the watermark
// moves on; a new binding (a new address, or unbound by the control side)
// takes the next one as its first.
TEST(JobTest, TheFirstWatermarkIsKeptPerBinding) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 2));
  EXPECT_FALSE(job->FirstAck(0)) << "no watermark yet";
  const MemberAddr home = Addr(0x020000000001ull, 1, 10, 0x0a000a01, 40001);
  ASSERT_EQ(job->BindMember(0, home, 0, 1000, 50), Job::Bind::kBound);
  EXPECT_TRUE(job->UpdateAck(0, 40));
  EXPECT_TRUE(job->UpdateAck(0, 45));
  EXPECT_FALSE(job->UpdateAck(0, 41)) << "a watermark never goes back";
  EXPECT_EQ(job->GetAck(0), 45u);
  EXPECT_EQ(job->FirstAck(0), 40u);
  const MemberAddr moved = Addr(0x020000000001ull, 1, 10, 0x0a000a01, 40777);
  ASSERT_EQ(job->BindMember(0, moved, 0, 1100, 50), Job::Bind::kRebound);
  EXPECT_FALSE(job->FirstAck(0));
  EXPECT_TRUE(job->UpdateAck(0, 3));
  EXPECT_EQ(job->FirstAck(0), 3u);
  job->UnbindMember(0);
  ASSERT_EQ(job->BindMember(0, home, 0, 1200, 50), Job::Bind::kBound);
  EXPECT_TRUE(job->UpdateAck(0, 9));
  EXPECT_EQ(job->FirstAck(0), 9u);
  EXPECT_FALSE(job->FirstAck(2)) << "out of range";
}

// Anyone with the job's key could claim a member: the first address keeps it.
TEST(JobTest, ABoundMemberIsRefusedFromElsewhereUntilSilentOrUnbound) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 2));
  const MemberAddr home = Addr(0x020000000001ull, 1, 10, 0x0a000a01, 40001);
  ASSERT_EQ(job->BindMember(1, home, 0, 1000, 50), Job::Bind::kBound);
  // Each part of the address counts: another port, VLAN, MAC, IP or UDP port.
  for (const MemberAddr& forged :
       {Addr(0x020000000001ull, 2, 10, 0x0a000a01, 40001), Addr(0x020000000001ull, 1, 20, 0x0a000a01, 40001),
        Addr(0x020000000099ull, 1, 10, 0x0a000a01, 40001), Addr(0x020000000001ull, 1, 10, 0x0a000a63, 40001),
        Addr(0x020000000001ull, 1, 10, 0x0a000a01, 40002)}) {
    EXPECT_EQ(job->BindMember(1, forged, 0, 1010, 50), Job::Bind::kRefused);
  }
  MemberAddr addr;
  ASSERT_TRUE(job->GetMember(1, &addr));
  EXPECT_EQ(addr.udp_port, 40001) << "the binding did not move";
  EXPECT_EQ(job->BindMember(1, home, 0, 1020, 50), Job::Bind::kKnown);
  // Silent for fewer than 50 ticks: still refused; for 50: rebound.
  const MemberAddr restarted = Addr(0x020000000001ull, 1, 10, 0x0a000a01, 40777);
  EXPECT_EQ(job->BindMember(1, restarted, 0, 1069, 50), Job::Bind::kRefused);
  EXPECT_EQ(job->BindMember(1, restarted, 0, 1070, 50), Job::Bind::kRebound);
  ASSERT_TRUE(job->GetMember(1, &addr));
  EXPECT_EQ(addr.udp_port, 40777);
  EXPECT_EQ(job->BindMember(1, home, 0, 1200, 0), Job::Bind::kRefused) << "rebind 0: never";
  // The control side unbinds; the next datagram binds.
  job->UnbindMember(1);
  EXPECT_FALSE(job->GetMember(1, &addr));
  EXPECT_EQ(job->BindMember(1, home, 0, 1201, 0), Job::Bind::kBound);
}

// The main server is bound as a member is, by its first datagram from its
// configured address and port; its binding does not lapse while it is
// silent, and only its own host takes it from another UDP port (no port
// configured: a restarted main server). Members' bindings are not its.
TEST(JobTest, TheMainServerIsBoundByItsFirstDatagramAndNeverLapses) {
  auto table = MakeTable();
  JobSpec spec = Spec(1, 2);
  spec.main_server_ip = 0x0a000a64;
  const Job* job = *table->Add(spec);
  const MemberAddr server = Addr(0x020000000064ull, 3, 10, 0x0a000a64, 45000);
  EXPECT_EQ(job->BindMainServer(Addr(0x020000000064ull, 3, 10, 0x0a000a65, 45000), 10),
            Job::Bind::kRefused)
      << "not its address";
  EXPECT_EQ(job->BindMainServer(server, 100), Job::Bind::kBound);
  EXPECT_EQ(job->BindMainServer(server, 101), Job::Bind::kKnown);
  // Another port, VLAN or MAC: refused, however long the main server has
  // been silent.
  for (const MemberAddr& forged :
       {Addr(0x020000000064ull, 4, 10, 0x0a000a64, 45000), Addr(0x020000000064ull, 3, 20, 0x0a000a64, 45000),
        Addr(0x0200000000beull, 3, 10, 0x0a000a64, 45000)}) {
    EXPECT_EQ(job->BindMainServer(forged, 1000000), Job::Bind::kRefused);
  }
  // Its own host from another UDP port: taken at once.
  EXPECT_EQ(job->BindMainServer(Addr(0x020000000064ull, 3, 10, 0x0a000a64, 45001), 1000001),
            Job::Bind::kRebound);
  EXPECT_EQ(job->BindMainServer(server, 1000002), Job::Bind::kRebound);
  MemberAddr addr;
  EXPECT_FALSE(job->GetMember(0, &addr)) << "no member bound by it";
  EXPECT_FALSE(job->GetMember(2, &addr)) << "nor one past the members";
  EXPECT_EQ(job->LearnedMembers(), 0);
  // With a port configured, only that port is the main server's.
  spec = Spec(2, 2);
  spec.main_server_ip = 0x0a000a64;
  spec.main_server_port = 45000;
  const Job* fixed = *table->Add(spec);
  EXPECT_EQ(fixed->BindMainServer(Addr(0x020000000064ull, 3, 10, 0x0a000a64, 45001), 1),
            Job::Bind::kRefused);
  EXPECT_EQ(fixed->BindMainServer(server, 2), Job::Bind::kBound);
  // A job without a main server has none to bind.
  EXPECT_EQ((*table->Add(Spec(3, 2)))->BindMainServer(server, 1), Job::Bind::kRefused);
}

// A member whose first datagram of a generation comes once another member
// has started a new run belongs to the new run: it is told so (new run) and
// binds in the new generation. Bound in the old one, its incarnation would
// be one of the ended run's, and every datagram of it refused (run ended).
TEST(JobTest, AFirstIncarnationAfterANewRunStartedIsTheNewRuns) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 3));
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr c = Addr(0x020000000003ull, 1, 0, 0x0a000a03, 40003);
  ASSERT_EQ(job->BindMember(0, a, 0x1111, 10, 0), Job::Bind::kBound);
  // Member 2 has not sent in this generation (the switch restarted, say).
  ASSERT_EQ(job->BindMember(0, a, 0x3333, 11, 0), Job::Bind::kNewRun);
  job->RequestNewRun(0, 0x3333);
  EXPECT_EQ(job->BindMember(2, c, 0x5555, 12, 0), Job::Bind::kNewRun);
  EXPECT_EQ(job->MemberIncarnation(2), 0u) << "not bound in the run that ends";
  ASSERT_EQ(table->TakeNewRuns(), std::vector<uint32_t>{1});
  const Job* next = *table->Renew(1);
  EXPECT_FALSE(next->EndedAnywhere(0x5555));
  EXPECT_EQ(next->BindMember(2, c, 0x5555, 13, 0), Job::Bind::kBound);
  EXPECT_EQ(next->BindMember(0, a, 0x1111, 13, 0), Job::Bind::kRunEnded);
}

// A switch whose parent ended the run it sends up under its label (NACK
// run_ended) ends that run too: the control thread renews the job as for a
// new run, and its members' incarnations end, so that they are told (run
// ended) instead of waiting on chunks the parent will never take. Only
// about its label now, and asked once.
TEST(JobTest, ARunItsParentEndedEndsHereToo) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 2));
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr b = Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40002);
  EXPECT_FALSE(job->EndRunAbove(0)) << "no label yet";
  ASSERT_EQ(job->BindMember(0, a, 0x1111, 10, 0), Job::Bind::kBound);
  ASSERT_EQ(job->BindMember(1, b, 0x2222, 10, 0), Job::Bind::kBound);
  const uint32_t label = job->label();
  ASSERT_NE(label, 0u);
  EXPECT_FALSE(job->EndRunAbove(label + 1)) << "another run's label";
  EXPECT_FALSE(job->RunEndedAbove());
  EXPECT_TRUE(table->TakeNewRuns().empty());
  EXPECT_TRUE(job->EndRunAbove(label));
  EXPECT_FALSE(job->EndRunAbove(label)) << "asked once";
  EXPECT_EQ(job->RunEndedAbove(), label);
  EXPECT_FALSE(job->NewRunRequest()) << "no member started a new run";
  ASSERT_EQ(table->TakeNewRuns(), std::vector<uint32_t>{1});
  EXPECT_TRUE(table->TakeNewRuns().empty()) << "taken once";
  const Job* next = *table->Renew(1);
  EXPECT_FALSE(next->RunEndedAbove());
  EXPECT_EQ(next->label(), 0u);
  EXPECT_EQ(next->BindMember(0, a, 0x1111, 11, 0), Job::Bind::kRunEnded);
  EXPECT_EQ(next->BindMember(1, b, 0x2222, 11, 0), Job::Bind::kRunEnded);
  // Their successors bind afresh, under a new label.
  EXPECT_EQ(next->BindMember(0, a, 0x3333, 12, 0), Job::Bind::kBound);
  EXPECT_EQ(next->BindMember(1, b, 0x4444, 12, 0), Job::Bind::kBound);
  EXPECT_NE(next->label(), 0u);
  EXPECT_NE(next->label(), label);
}

// A member is bound to the first incarnation it sends; another one is a new
// run of the job, which the control thread starts by renewing the job; the
// old run's incarnations then end. Once every member has one, the job has a
// run label: the same members' incarnations give the same label.
TEST(JobTest, ANewIncarnationIsANewRunAndTheOldOneEnds) {
  auto table = MakeTable();
  JobSpec spec = Spec(1, 2);
  spec.tan = JobSpec::Tan::kRemote;
  spec.tan_peer = JobPeer{0x0a000005, 47000, 0, 0};
  const Job* job = *table->Add(spec);
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr b = Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40002);
  job->SetHop(Job::kTanHop, Addr(0x020000000005ull, 3, 0, 0x0a000005, 47000));
  EXPECT_EQ(job->label(), 0u);
  ASSERT_EQ(job->BindMember(0, a, 0x1111, 10, 0), Job::Bind::kBound);
  EXPECT_EQ(job->MemberIncarnation(0), 0x1111u);
  EXPECT_EQ(job->label(), 0u) << "not every member has an incarnation yet";
  ASSERT_EQ(job->BindMember(1, b, 0x2222, 10, 0), Job::Bind::kBound);
  const uint32_t label = job->label();
  EXPECT_NE(label, 0u);
  MemberAddr got;
  ASSERT_TRUE(job->GetMember(1, &got));
  EXPECT_EQ(got.incarnation, 0x2222u) << "what the switch's datagrams to it carry";
  EXPECT_EQ(job->BindMember(0, a, 0x1111, 11, 0), Job::Bind::kKnown);
  EXPECT_EQ(job->BindMember(0, a, 0, 11, 0), Job::Bind::kKnown) << "0 is no incarnation";
  EXPECT_TRUE(table->TakeNewRuns().empty());

  // Another incarnation from another host, while member 0's is alive, is a
  // forger's: refused as any other address is, whatever it claims (with
  // member_rebind_ms, only once the bound address has been silent that long).
  MemberAddr other_host = a;
  other_host.ip = 0x0a000a09;
  MemberAddr other_mac = a;
  other_mac.mac48 = 0x020000000009ull;
  EXPECT_EQ(job->BindMember(0, other_host, 0x3333, 12, 0), Job::Bind::kRefused);
  EXPECT_EQ(job->BindMember(0, other_mac, 0x3333, 12, 100), Job::Bind::kRefused);
  EXPECT_FALSE(job->NewRunRequest());
  // Member 0 comes back as another process: from the same address, or from
  // another UDP port of its host.
  MemberAddr new_port = a;
  new_port.udp_port = 40999;
  EXPECT_EQ(job->BindMember(0, new_port, 0x3333, 12, 0), Job::Bind::kNewRun);
  EXPECT_EQ(job->BindMember(0, a, 0x3333, 12, 0), Job::Bind::kNewRun);
  EXPECT_EQ(job->MemberIncarnation(0), 0x1111u) << "nothing bound before the new run starts";
  job->RequestNewRun(0, 0x3333);
  job->RequestNewRun(0, 0x3333);  // its resend, before the control thread ran
  EXPECT_EQ(job->NewRunRequest(), (uint64_t{0} << 32 | 0x3333u));
  EXPECT_EQ(table->TakeNewRuns(), std::vector<uint32_t>{1});
  EXPECT_TRUE(table->TakeNewRuns().empty()) << "taken once";

  ASSERT_TRUE(job->SetExcluded(1, true));  // a straggler prediction applied
  auto renewed = table->Renew(1);
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  const Job* next = *renewed;
  EXPECT_TRUE(next->Excluded(1)) << "predictions are about places, not runs";
  EXPECT_FALSE(next->Excluded(0));
  EXPECT_EQ(next->excluded_count(), 1u);
  EXPECT_EQ(table->Find(1), next);
  EXPECT_NE(next->generation(), job->generation());
  EXPECT_EQ(next->index(), job->index()) << "its counters go on";
  EXPECT_EQ(next->tan(), JobSpec::Tan::kRemote);
  MemberAddr tan;
  EXPECT_TRUE(next->GetHop(Job::kTanHop, &tan)) << "resolved hops carry over";
  EXPECT_FALSE(next->GetMember(0, &got)) << "members bind afresh";
  EXPECT_EQ(next->label(), 0u);
  EXPECT_FALSE(next->NewRunRequest());
  // The old run's processes are refused, wherever they send from.
  EXPECT_EQ(next->BindMember(1, b, 0x2222, 13, 0), Job::Bind::kRunEnded);
  EXPECT_EQ(next->BindMember(0, a, 0x1111, 13, 0), Job::Bind::kRunEnded);
  EXPECT_TRUE(next->EndedAnywhere(0x2222));
  EXPECT_FALSE(next->EndedAnywhere(0x3333));
  EXPECT_FALSE(next->EndedAnywhere(0));
  // The new run's bind; the same incarnations give the same label again.
  EXPECT_EQ(next->BindMember(0, a, 0x3333, 13, 0), Job::Bind::kBound);
  EXPECT_EQ(next->BindMember(1, b, 0x4444, 13, 0), Job::Bind::kBound);
  const uint32_t next_label = next->label();
  EXPECT_NE(next_label, 0u);
  EXPECT_NE(next_label, label);
  const Job* same = *table->Add(Spec(2, 2));
  ASSERT_EQ(same->BindMember(1, b, 0x4444, 13, 0), Job::Bind::kBound);
  ASSERT_EQ(same->BindMember(0, a, 0x3333, 13, 0), Job::Bind::kBound);
  EXPECT_NE(same->label(), next_label) << "the job id counts too";
  EXPECT_EQ(table->Renew(99).status().code(), StatusCode::kNotFound);
  // The old generation is freed once readers moved on; the index stays the job's.
  EXPECT_EQ(table->Reclaim(), 0u) << "a renewed generation frees no index";
  EXPECT_EQ(table->size(), 2u);
}

// With a run id (the same incarnation at every rank, kRunId), a member that
// never sent in the last run still starts the new one: the generation
// knows its run by its id, not only by each member's incarnation.
TEST(JobTest, ARunIdTellsANewRunEvenByAMemberThatNeverSent) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 2));
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr b = Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40002);
  // The last run: only member 1 sent (member 0 died before it could).
  ASSERT_EQ(job->BindMember(1, b, 0xaaaa, 10, 0, true), Job::Bind::kBound);
  EXPECT_EQ(job->BindMember(1, b, 0xaaaa, 11, 0, true), Job::Bind::kKnown);
  // Member 0 of the next run: never bound, yet a new run.
  EXPECT_EQ(job->BindMember(0, a, 0xbbbb, 12, 0, true), Job::Bind::kNewRun);
  job->RequestNewRun(0, 0xbbbb);
  ASSERT_EQ(table->TakeNewRuns(), std::vector<uint32_t>{1});
  const Job* next = *table->Renew(1);
  EXPECT_EQ(next->BindMember(0, a, 0xbbbb, 13, 0, true), Job::Bind::kBound);
  EXPECT_EQ(next->BindMember(1, b, 0xaaaa, 13, 0, true), Job::Bind::kRunEnded)
      << "the last run's member";
  EXPECT_EQ(next->BindMember(1, b, 0xbbbb, 14, 0, true), Job::Bind::kBound);
  // Without run ids the switch cannot tell: member 0 binds into the run.
  const Job* plain = *table->Add(Spec(2, 2));
  ASSERT_EQ(plain->BindMember(1, b, 0xaaaa, 10, 0), Job::Bind::kBound);
  EXPECT_EQ(plain->BindMember(0, a, 0xbbbb, 12, 0), Job::Bind::kBound);
}

// Something that must go up before every member has sent goes under a
// label of the members that have, fixed for the generation. Not at a
// parameter-server job's root: back from a restart, with one member sent
// again, such a label would be a new run to its TAN, which would apply the
// step of a chunk it answered before the restart again (seed 350100). The
// root waits for every member, and then has the run's label, as before the
// restart.
TEST(JobTest, AParameterServerRootFixesNoLabelBeforeEveryMemberHasSent) {
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr b = Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40002);
  JobSpec spec = Spec(1, 2);
  spec.tan = JobSpec::Tan::kRemote;
  spec.tan_peer = JobPeer{0x0a000005, 47000, 0, 0};
  spec.parameter_server = true;
  // The run before the restart: both members sent.
  auto before = MakeTable();
  const Job* run = *before->Add(spec);
  ASSERT_EQ(run->BindMember(0, a, 0x1111, 10, 0), Job::Bind::kBound);
  ASSERT_EQ(run->BindMember(1, b, 0x2222, 10, 0), Job::Bind::kBound);
  const uint32_t label = run->UpLabel();
  ASSERT_NE(label, 0u);
  // After it: member 1 sends again, member 0 not yet.
  auto after = MakeTable();
  const Job* job = *after->Add(spec);
  ASSERT_EQ(job->BindMember(1, b, 0x2222, 20, 0), Job::Bind::kBound);
  EXPECT_EQ(job->UpLabel(), 0u) << "no label of member 1 alone";
  EXPECT_EQ(job->label(), 0u) << "and none fixed";
  ASSERT_EQ(job->BindMember(0, a, 0x1111, 21, 0), Job::Bind::kBound);
  EXPECT_EQ(job->UpLabel(), label) << "the run's label, its TAN goes on";
  // Any other job fixes one early, as it must for a member that never comes.
  const Job* plain = *after->Add(Spec(2, 2));
  ASSERT_EQ(plain->BindMember(1, b, 0x2222, 20, 0), Job::Bind::kBound);
  const uint32_t early = plain->UpLabel();
  EXPECT_NE(early, 0u);
  ASSERT_EQ(plain->BindMember(0, a, 0x1111, 21, 0), Job::Bind::kBound);
  EXPECT_EQ(plain->UpLabel(), early) << "fixed for the generation";
}

// Within its restart grace (`settling`), no job's switch fixes a label of
// some members: back from a restart, with one member sent again, that label
// would be a new run to the parent, which would end the run's labels at the
// other switches (seeds 550246, 470838). Once every member has sent, the
// label is the run's from before the restart. After the grace a member
// still missing may never come: the label of those that sent, as before.
TEST(JobTest, NoLabelIsFixedEarlyWithinTheRestartGrace) {
  const MemberAddr a = Addr(0x020000000001ull, 1, 0, 0x0a000a01, 40001);
  const MemberAddr b = Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40002);
  // The run before the restart: both members sent.
  auto before = MakeTable();
  const Job* run = *before->Add(Spec(1, 2));
  ASSERT_EQ(run->BindMember(0, a, 0x1111, 10, 0), Job::Bind::kBound);
  ASSERT_EQ(run->BindMember(1, b, 0x2222, 10, 0), Job::Bind::kBound);
  const uint32_t label = run->UpLabel();
  ASSERT_NE(label, 0u);
  // After it, within the grace: member 1 sends again, member 0 not yet.
  auto after = MakeTable();
  const Job* job = *after->Add(Spec(1, 2));
  ASSERT_EQ(job->BindMember(1, b, 0x2222, 20, 0), Job::Bind::kBound);
  EXPECT_EQ(job->UpLabel(/*settling=*/true), 0u) << "no label of member 1 alone";
  EXPECT_EQ(job->label(), 0u) << "and none fixed";
  ASSERT_EQ(job->BindMember(0, a, 0x1111, 21, 0), Job::Bind::kBound);
  EXPECT_EQ(job->UpLabel(true), label) << "the run's label: the parent goes on";
  EXPECT_EQ(job->UpLabel(false), label);
  // After the grace, member 0 never came: the label of member 1 alone,
  // fixed for the generation.
  auto later = MakeTable();
  const Job* alone = *later->Add(Spec(1, 2));
  ASSERT_EQ(alone->BindMember(1, b, 0x2222, 20, 0), Job::Bind::kBound);
  EXPECT_EQ(alone->UpLabel(true), 0u);
  const uint32_t early = alone->UpLabel(false);
  EXPECT_NE(early, 0u);
  EXPECT_NE(early, label);
  ASSERT_EQ(alone->BindMember(0, a, 0x1111, 30, 0), Job::Bind::kBound);
  EXPECT_EQ(alone->UpLabel(true), early) << "fixed: the grace does not undo it";
  // A rerun (new processes) gets another label, with every member in or
  // fixed early after the grace: its incarnations are new.
  ASSERT_EQ(job->BindMember(1, b, 0x4444, 40, 0), Job::Bind::kNewRun);
  const Job* rerun = *after->Renew(1);
  ASSERT_EQ(rerun->BindMember(1, b, 0x4444, 41, 0), Job::Bind::kBound);
  EXPECT_EQ(rerun->UpLabel(true), 0u);
  const uint32_t rerun_early = rerun->UpLabel(false);
  EXPECT_NE(rerun_early, 0u);
  EXPECT_NE(rerun_early, label);
  EXPECT_NE(rerun_early, early);
  const Job* rerun2 = *after->Renew(1);
  ASSERT_EQ(rerun2->BindMember(1, b, 0x6666, 50, 0), Job::Bind::kBound);
  ASSERT_EQ(rerun2->BindMember(0, a, 0x5555, 50, 0), Job::Bind::kBound);
  EXPECT_NE(rerun2->UpLabel(true), 0u);
  EXPECT_NE(rerun2->UpLabel(true), label);
}

// A job keeps at most slot_quota chunks ahead of its slowest member's
// watermark; late data and retransmissions before it always pass.
TEST(JobTest, SlotQuotaBoundsTheChunksAheadOfTheSlowestMember) {
  auto table = MakeTable();
  JobSpec spec = Spec(1, 3);
  spec.slot_quota = 8;
  const Job* job = *table->Add(spec);
  EXPECT_TRUE(job->SeqAllowed(1000000, 1, 0)) << "no watermark yet";
  job->UpdateAck(0, 100);
  job->UpdateAck(1, 104);
  EXPECT_TRUE(job->SeqAllowed(100, 2, 0));
  EXPECT_TRUE(job->SeqAllowed(107, 2, 0));
  EXPECT_FALSE(job->SeqAllowed(108, 3, 0));
  EXPECT_TRUE(job->SeqAllowed(99, 3, 0)) << "before the watermark";
  // A member ahead of the slowest moves on: the cache stands within the tick.
  job->UpdateAck(1, 106);
  EXPECT_FALSE(job->SeqAllowed(108, 3, 0));
  job->UpdateAck(1, 104);  // a reordered, older one: no move
  // The slowest member moves on: the quota follows within the same tick.
  job->UpdateAck(0, 110);
  EXPECT_TRUE(job->SeqAllowed(108, 3, 0));
  EXPECT_FALSE(job->SeqAllowed(114, 3, 0));
  EXPECT_TRUE(job->SeqAllowed(108, 4, 0));
  EXPECT_TRUE(job->SeqAllowed(111, 4, 0));
  EXPECT_TRUE(job->SeqAllowed(113, 4, 0));
  EXPECT_FALSE(job->SeqAllowed(114, 4, 0)) << "member 1's 106 is the smallest now";
  // Across the 32-bit wrap.
  job->UpdateAck(0, 0xfffffffc);
  job->UpdateAck(1, 0xfffffffe);
  JobSpec wrap = Spec(2, 1);
  wrap.slot_quota = 8;
  const Job* w = *table->Add(wrap);
  w->UpdateAck(0, 0xfffffffc);
  EXPECT_TRUE(w->SeqAllowed(3, 5, 0));
  EXPECT_FALSE(w->SeqAllowed(4, 6, 0));
  // No quota: anything goes.
  const Job* free_job = *table->Add(Spec(3, 1));
  free_job->UpdateAck(0, 5);
  EXPECT_TRUE(free_job->SeqAllowed(5000000, 1, 0));
}

// A rank that gets more than a quota of results a tick: each refresh of the
// cached watermark lets it (quota - window) chunks further, and it must not
// wait for the next tick for the one after. A refused chunk stalls its
// window until a retransmission timeout.
TEST(JobTest, SlotQuotaFollowsTheSlowestWatermarkWithinATick) {
  auto table = MakeTable();
  JobSpec spec = Spec(1, 1);
  spec.slot_quota = 256;
  const Job* job = *table->Add(spec);
  constexpr uint32_t kWindow = 32;
  constexpr uint32_t kTick = 7;
  // 1000 chunks in one tick, each sent when the one kWindow before it was
  // answered, carrying that watermark.
  for (uint32_t seq = 0; seq < 1000; ++seq) {
    job->UpdateAck(0, seq < kWindow ? 0 : seq - kWindow + 1);
    ASSERT_TRUE(job->SeqAllowed(seq, kTick, 0)) << "seq " << seq;
  }
  // Beyond the quota of the latest watermark: still refused.
  EXPECT_FALSE(job->SeqAllowed(968 + 256, kTick, 0));
  EXPECT_TRUE(job->SeqAllowed(968 + 255, kTick, 0));
  // Hold windows follow the same cache.
  JobSpec ordered = Spec(2, 3);
  ordered.hold_quota = 16;  // a window of 8 chunks
  const Job* o = *table->Add(ordered);
  for (uint16_t m = 0; m < 3; ++m) o->UpdateAck(m, 100);
  EXPECT_FALSE(o->HoldAllowed(108, kTick, 0));
  for (uint16_t m = 0; m < 3; ++m) o->UpdateAck(m, 101);
  EXPECT_TRUE(o->HoldAllowed(108, kTick, 0));
}

// The watermark a rank's previous process left behind holds nothing back:
// a member silent for the rebind time is presumed gone, and a rebound or
// unbound member's watermark starts afresh.
TEST(JobTest, GoneMembersWatermarksHoldNoSlot) {
  auto table = MakeTable();
  JobSpec spec = Spec(1, 3);
  spec.slot_quota = 8;
  const Job* job = *table->Add(spec);
  for (uint16_t m = 0; m < 3; ++m) {
    ASSERT_EQ(job->BindMember(m, Addr(0x020000000001ull + m, m, 0, 0x0a000a01 + m, 40000), 0, 10, 100),
              Job::Bind::kBound);
    job->UpdateAck(m, 100);
  }
  // A new run at 5000: members 0 and 1 speak at tick 200, member 2 is late.
  for (uint16_t m = 0; m < 2; ++m) {
    ASSERT_EQ(job->BindMember(m, Addr(0x020000000001ull + m, m, 0, 0x0a000a01 + m, 40000), 0, 200, 100),
              Job::Bind::kKnown);
    job->UpdateAck(m, 5000);
  }
  EXPECT_EQ(job->MinAck(), 100u);
  EXPECT_EQ(job->SlotWatermark(200, 100), 5000u) << "member 2 silent for 190 ticks: gone";
  EXPECT_EQ(job->SlotWatermark(109, 100), 100u) << "silent for 99: still current";
  EXPECT_EQ(job->SlotWatermark(200, 0), 100u) << "gone_ticks 0: nobody is presumed gone";
  EXPECT_TRUE(job->SeqAllowed(5007, 200, 100));
  EXPECT_FALSE(job->SeqAllowed(5008, 201, 100));
  // Nobody current: MinAck.
  EXPECT_EQ(job->SlotWatermark(1000, 100), 100u);

  // Member 2's new process, from another UDP port, starts over at 40.
  ASSERT_EQ(job->BindMember(2, Addr(0x020000000003ull, 2, 0, 0x0a000a03, 40999), 0, 210, 100),
            Job::Bind::kRebound);
  EXPECT_FALSE(job->GetAck(2)) << "the old process's watermark is gone";
  job->UpdateAck(2, 40);
  EXPECT_EQ(job->GetAck(2), 40u);
  EXPECT_EQ(job->SlotWatermark(210, 100), 40u);
  job->UnbindMember(2);
  EXPECT_FALSE(job->GetAck(2));
  EXPECT_EQ(job->SlotWatermark(210, 100), 5000u);
}

// Each lcore reads the members' clock from its own snapshot of the TSC,
// which may lag another's by a tick: a member that lcore 1 saw at tick 201
// is current for lcore 0 at tick 200, not silent for 2^32 - 1 ticks. Taken
// for gone, its watermark would stop holding the job's slots, and a result
// it lacks would give way everywhere.
TEST(JobTest, AMemberSeenByAnLcoreAheadIsNotGone) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 2));
  for (uint16_t m = 0; m < 2; ++m) {
    ASSERT_EQ(job->BindMember(m, Addr(0x020000000001ull + m, m, 0, 0x0a000a01 + m, 40000), 0, 200, 100),
              Job::Bind::kBound);
  }
  job->UpdateAck(0, 13);
  // Member 1 again, seen by an lcore whose clock is a tick ahead.
  ASSERT_EQ(job->BindMember(1, Addr(0x020000000002ull, 1, 0, 0x0a000a02, 40000), 0, 201, 100),
            Job::Bind::kKnown);
  job->UpdateAck(1, 11);
  EXPECT_EQ(job->SlotWatermark(200, 100), 11u) << "member 1 holds the watermark";
  // Nor may another address take its node id as if it were silent.
  EXPECT_EQ(job->BindMember(1, Addr(0x020000000009ull, 1, 0, 0x0a000a09, 40000), 0, 200, 100),
            Job::Bind::kRefused);
}

TEST(JobTest, SlotOffsetsAreKeyedBySecret) {
  auto a = MakeTable();
  auto b = MakeTable();
  a->SetSlotSecret(common::SipKey{1, 2});
  b->SetSlotSecret(common::SipKey{3, 4});
  int differ = 0;
  for (uint32_t id = 1; id <= 32; ++id) {
    const Job* ja = *a->Add(Spec(id));
    const Job* jb = *b->Add(Spec(id));
    EXPECT_EQ(ja->slot_offset(), SlotOffset(common::SipKey{1, 2}, id));
    differ += ja->slot_offset() != jb->slot_offset();
    if (id == 8) break;
  }
  EXPECT_GE(differ, 7);
}

// A job moves at most once, and only with a slot quota: its moved partition
// spans the quota from the base, and the hint its results carry names it
// for the chunks at or after the cut (serial order) only.
TEST(JobTest, AJobMovesOnceIntoAPartitionOfItsQuota) {
  auto table = MakeTable();
  const Job* none = *table->Add(Spec(1));
  EXPECT_FALSE(none->SetMove({10, 100})) << "no slot quota";
  EXPECT_FALSE(none->move().has_value());
  JobSpec spec = Spec(2);
  spec.slot_quota = 24;
  const Job* job = *table->Add(spec);
  EXPECT_FALSE(job->move().has_value());
  EXPECT_FALSE(job->MovedFrom(0));
  EXPECT_EQ(job->MoveHint(5), kNoSlotHint);
  EXPECT_FALSE(job->SetMove({0xfffffff0u, uint32_t{1} << 31})) << "a base past 2^31";
  ASSERT_TRUE(job->SetMove({0xfffffff0u, 300}));
  EXPECT_FALSE(job->SetMove({5, 600})) << "once";
  ASSERT_TRUE(job->move().has_value());
  EXPECT_EQ(job->move()->cut, 0xfffffff0u);
  EXPECT_EQ(job->move()->base, 300u);
  EXPECT_FALSE(job->MovedFrom(0xffffffefu));
  EXPECT_TRUE(job->MovedFrom(0xfffffff0u));
  EXPECT_TRUE(job->MovedFrom(3)) << "after the wrap";
  EXPECT_EQ(job->MoveHint(3), kMovedSlotHint);
  EXPECT_EQ(job->MoveHint(0xffffffe0u), kNoSlotHint);
  const JobPlacement p = job->moved_placement();
  EXPECT_TRUE(p.partitioned());
  const SlotRegion region = SlotRegion::Make(1000, 512);
  for (uint32_t seq = 0; seq < 100; ++seq) {
    EXPECT_EQ(region.Of(p, seq), 1000 + 300 + seq % 24);
  }
}

TEST(JobTest, AckWatermarkIsMonotonicInSerialOrder) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 4));
  EXPECT_FALSE(job->GetAck(0));
  EXPECT_FALSE(job->MinAck());

  // The first watermark is taken as is, even one "before" zero.
  EXPECT_TRUE(job->UpdateAck(0, 0x90000000u));
  EXPECT_EQ(job->GetAck(0), 0x90000000u);
  EXPECT_TRUE(job->UpdateAck(0, 0x90000010u));
  EXPECT_FALSE(job->UpdateAck(0, 0x90000010u));  // a repeat
  EXPECT_FALSE(job->UpdateAck(0, 0x90000005u));  // a reordered, older one
  EXPECT_EQ(job->GetAck(0), 0x90000010u);

  // Across the wrap: 0xfffffff0 -> 0x00000010 moves forward.
  EXPECT_TRUE(job->UpdateAck(1, 0xfffffff0u));
  EXPECT_TRUE(job->UpdateAck(1, 0x10u));
  EXPECT_FALSE(job->UpdateAck(1, 0xfffffff8u));  // before 0x10 in serial order
  EXPECT_EQ(job->GetAck(1), 0x10u);
}

TEST(JobTest, MinAckIsSerialMinimumOverAckedMembers) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 4));
  ASSERT_TRUE(job->UpdateAck(2, 100));
  EXPECT_EQ(job->MinAck(), 100u);  // members 0, 1 and 3 have not sent one yet
  ASSERT_TRUE(job->UpdateAck(0, 250));
  ASSERT_TRUE(job->UpdateAck(3, 90));
  EXPECT_EQ(job->MinAck(), 90u);
  ASSERT_TRUE(job->UpdateAck(3, 300));
  EXPECT_EQ(job->MinAck(), 100u);

  // Around the wrap the minimum is the one furthest behind, not the smallest number.
  const Job* wrap = *table->Add(Spec(2, 3));
  ASSERT_TRUE(wrap->UpdateAck(0, 0xfffffffeu));
  ASSERT_TRUE(wrap->UpdateAck(1, 3));
  ASSERT_TRUE(wrap->UpdateAck(2, 0xffffffffu));
  EXPECT_EQ(wrap->MinAck(), 0xfffffffeu);
}

// Racing writers of one member's watermark converge on the latest value.
TEST(JobTest, RacingAckWritersConverge) {
  auto table = MakeTable();
  const Job* job = *table->Add(Spec(1, 1));
  constexpr uint32_t kBase = 0xffff0000u;  // crosses the wrap on the way
  constexpr uint32_t kSteps = 200000;
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([job, t] {
      for (uint32_t i = t; i < kSteps; i += 3) job->UpdateAck(0, kBase + i);
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(job->GetAck(0), kBase + kSteps - 1);
}

// A reader thread looks jobs up and writes member state while the control
// thread adds, removes and reclaims. The reader follows the QSBR protocol, so
// every job it sees is whole: its id, key and member count agree with the spec
// that created it (a freed job, or one reallocated for another id, would not;
// an ASan build also catches the use after free directly).
TEST(JobTableTest, ConcurrentReadersNeverSeeAFreedJob) {
  constexpr uint32_t kIds = 48;
  constexpr int kReaders = 2;
  auto table = MakeTable(32, 64);
  auto members_of = [](uint32_t id) { return static_cast<uint16_t>(1 + id % 64); };
  auto key_of = [](uint32_t id) {
    return 0x5eed000000000000ull ^ (uint64_t{id} * 0x9e3779b97f4a7c15ull);
  };

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    auto reader = table->RegisterReader();
    ASSERT_TRUE(reader.ok());
    readers.emplace_back([&, id = *reader, r] {
      table->ReaderOnline(id);
      uint32_t seq = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint32_t job_id = 1; job_id <= kIds; ++job_id) {
          const Job* job = table->Find(job_id);
          if (job == nullptr) continue;
          hits.fetch_add(1, std::memory_order_relaxed);
          if (job->id() != job_id || job->key() != key_of(job_id) ||
              job->members() != members_of(job_id) || job->index() >= 32) {
            bad.fetch_add(1, std::memory_order_relaxed);
          }
          const uint16_t node = static_cast<uint16_t>(seq % job->members());
          MemberAddr from;
          from.mac48 = 0x020000000000ull | r;
          from.port_index = static_cast<uint8_t>(r);
          from.vlan = 10;
          from.ip = 0x0a000001 + r;
          from.udp_port = 40000;
          (void)job->BindMember(node, from, 0, seq, 1);
          job->UpdateAck(node, seq);
        }
        ++seq;
        table->Quiescent(id);
      }
      table->ReaderOffline(id);
    });
  }

  std::mt19937 rng(7);
  uint64_t adds = 0, removes = 0, freed = 0;
  // Until enough churn happened: the readers may lag on a loaded machine, and
  // then the table stays full until they pass a quiescent point.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int step = 0; (step < 200000 || adds < 2000) && std::chrono::steady_clock::now() < deadline;
       ++step) {
    const uint32_t id = 1 + rng() % kIds;
    if (rng() % 2 == 0) {
      JobSpec spec;
      spec.id = id;
      spec.key = key_of(id);
      spec.members = members_of(id);
      spec.origin = JobSpec::Origin::kApi;
      if (table->Add(spec).ok()) ++adds;
    } else if (table->Remove(id).ok()) {
      ++removes;
    }
    freed += table->Reclaim();
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  freed += table->Reclaim();

  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_GE(adds, 2000u);
  EXPECT_GT(removes, 1000u);
  EXPECT_GT(freed, 0u);
  // With every reader offline, everything removed is freed.
  EXPECT_EQ(table->pending_reclaim(), 0u);
  EXPECT_EQ(table->size(), adds - removes);
}

}  // namespace
}  // namespace aggswitch::aggregator
