// cache_fuzz: the data cache's parsers of outside bytes (cache/): the
// daemon's and the loader's YAML configs (cache_config.h), a store's
// MANIFEST (external_store.h), and the item and node records read back from
// etcd or the record file (records.h). The first byte picks the parser; the
// rest is its input.
//
// Invariants, each a finding when broken:
//   * a config that loads is one the daemon can start from: its node is one
//     of its nodes, replicas at most the node count, a region directory set;
//     a loader config with read_through names its store;
//   * every manifest entry is a valid relative object name;
//   * a record that parses prints as JSON that parses back to the same record.
#include <string>

#include "cache/cache_config.h"
#include "cache/external_store.h"
#include "cache/records.h"
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
  switch (data[0] % 5) {
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
  }
  return 0;
}
