// cache_fuzz: the data cache's parsers of outside bytes (cache/): the
// daemon's and the loader's YAML configs (cache_config.h), a store's
// MANIFEST (external_store.h), the item and node records read back from
// etcd or the record file (records.h), and the handshake a daemon and a
// loader exchange over UCX (handshake.h): a hello, a fill request, a
// daemon's reply, and the region check a holder's address passes. The first
// byte picks the parser; the rest is its input.
//
// Invariants, each a finding when broken:
//   * a config that loads is one the daemon can start from: its node is one
//     of its nodes, replicas at most the node count, a region directory set;
//     a loader config with read_through names its store;
//   * every manifest entry is a valid relative object name;
//   * a record that parses prints as JSON that parses back to the same record;
//   * a hello, a fill request and a reply that parse are built again into
//     the same bytes; an accepted reply has a key and a region inside the
//     address space; a fill names an object a store may hold;
//   * an address HolderInRegion accepts has the item and its header inside
//     the region, by arithmetic that cannot wrap.
#include <algorithm>
#include <cstring>
#include <string>

#include "cache/cache_config.h"
#include "cache/external_store.h"
#include "cache/handshake.h"
#include "cache/records.h"
#include "cache/region.h"
#include "common/log.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  aggswitch::common::SetLogLevel(aggswitch::common::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace aggswitch::cache;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 9) {
    case 0: {
      auto c = ParseDaemonConfig(text, "<fuzz>");
      if (!c.ok()) {
        FUZZ_CHECK(!c.status().message().empty());
        break;
      }
      FUZZ_CHECK(std::find(c->nodes.begin(), c->nodes.end(), c->node) != c->nodes.end());
      FUZZ_CHECK(c->replicas >= 1 && c->replicas <= c->nodes.size());
      FUZZ_CHECK(!c->region_dir.empty() && !c->allow_nodes.empty());
      break;
    }
    case 1: {
      auto c = ParseLoaderConfig(text, "<fuzz>");
      if (!c.ok()) {
        FUZZ_CHECK(!c.status().message().empty());
        break;
      }
      FUZZ_CHECK(c->amount > 0);
      FUZZ_CHECK(c->miss != MissPolicy::kReadThrough || !c->store.empty());
      break;
    }
    case 2: {
      auto m = ExternalStore::ParseManifest(text);
      if (!m.ok()) break;
      for (const ExternalStore::Entry& e : *m) FUZZ_CHECK(ExternalStore::ValidName(e.name));
      auto again = ExternalStore::ParseManifest(ExternalStore::FormatManifest(*m));
      FUZZ_CHECK(again.ok() && again->size() == m->size());
      break;
    }
    case 3: {
      auto r = ParseItemRecord(text);
      if (!r.ok()) break;
      auto back = ParseItemRecord(ToJson(*r));
      FUZZ_CHECK(back.ok());
      FUZZ_CHECK(back->item == r->item && back->length == r->length && back->version == r->version &&
                 back->crc32c == r->crc32c && back->holders == r->holders);
      break;
    }
    case 4: {
      auto r = ParseNodeRecord(text);
      if (!r.ok()) break;
      auto back = ParseNodeRecord(ToJson(*r));
      FUZZ_CHECK(back.ok() && back->node == r->node && back->ucx_listen == r->ucx_listen &&
                 back->members == r->members);
      break;
    }
    case 5: {
      auto job = ParseHello(text.data(), text.size(), false);
      if (!job.ok()) {
        FUZZ_CHECK(!job.status().message().empty());
        break;
      }
      FUZZ_CHECK(job->size() <= kMaxJobName && BuildHello(*job) == text);
      break;
    }
    case 6: {
      const auto item = ParseFill(text.data(), text.size(), false);
      if (item) FUZZ_CHECK(*item == text && ExternalStore::ValidName(*item));
      FUZZ_CHECK(!ParseFill(text.data(), text.size(), true));
      break;
    }
    case 7: {
      auto p = ParseHelloReply(text.data(), text.size());
      if (!p.ok()) {
        FUZZ_CHECK(!p.status().message().empty());
        break;
      }
      FUZZ_CHECK(BuildHelloReply(p->reply, p->tail) == text && p->tail.size() <= kMaxReplyTail);
      if (p->reply.status == HelloReply::kAccepted) {
        FUZZ_CHECK(!p->tail.empty() && p->reply.region_size > 0 &&
                   p->reply.region_base <= UINT64_MAX - p->reply.region_size);
      }
      break;
    }
    case 8: {
      uint64_t v[4] = {};  // addr, length, base, size
      std::memcpy(v, text.data(), std::min(text.size(), sizeof(v)));
      if (HolderInRegion(v[0], v[1], v[2], v[3])) {
        using U = unsigned __int128;
        FUZZ_CHECK(v[0] >= v[2] && v[0] - v[2] >= sizeof(ItemHeader));
        FUZZ_CHECK(U{v[0]} + v[1] <= U{v[2]} + v[3]);
      }
      break;
    }
  }
  return 0;
}
