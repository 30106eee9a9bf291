#include "cache/etcd_records.h"

#include <curl/curl.h>

#include <charconv>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

namespace aggswitch::cache {
namespace {

using nlohmann::json;

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> Unbase64(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(kB64, c);
    if (p == nullptr || c == '\0') return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// The key just past every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<uint8_t>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// The gateway writes int64 as a decimal string and leaves zero values out.
int64_t Int64Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  }
  if (it->is_number()) return it->get<int64_t>();
  return 0;
}

// A string member of `j`, or "" when it is absent or not a string.
std::string StringField(const json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

size_t Collect(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    const std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

EtcdRecords::EtcdRecords(std::vector<std::string> endpoints, std::string prefix)
    : curl_(curl_easy_init()), endpoints_(std::move(endpoints)), prefix_(std::move(prefix)) {}

EtcdRecords::~EtcdRecords() {
  if (curl_ != nullptr) curl_easy_cleanup(curl_);
}

common::Result<std::unique_ptr<Records>> EtcdRecords::Open(const std::string& endpoints,
                                                           const std::string& prefix) {
  std::vector<std::string> list = Split(endpoints, ',');
  if (list.empty()) return common::InvalidArgument("etcd:// names no endpoint");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::unique_ptr<EtcdRecords> r(new EtcdRecords(std::move(list), prefix));
  if (r->curl_ == nullptr) return common::Internal("curl_easy_init failed");
  // Reach etcd now, so that a wrong address is an error at start.
  auto probe = r->Range(prefix + "/nodes/", true);
  if (!probe.ok()) return probe.status();
  return std::unique_ptr<Records>(std::move(r));
}

std::string EtcdRecords::Describe() const {
  std::string s = "etcd";
  for (const std::string& e : endpoints_) s += " http://" + e;
  return s;
}

common::Result<std::string> EtcdRecords::Post(const std::string& path, const std::string& body) {
  std::string last_error;
  for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const std::string& endpoint = endpoints_[current_];
    const std::string url = "http://" + endpoint + path;
    std::string reply;
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, Collect);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, kTimeoutMs);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    const CURLcode rc = curl_easy_perform(curl_);
    long status = 0;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && status == 200) return reply;
    last_error = rc != CURLE_OK ? std::string(curl_easy_strerror(rc))
                                : "HTTP " + std::to_string(status) + ": " + reply.substr(0, 200);
    if (rc == CURLE_OK) break;  // etcd answered: another endpoint would say the same
    current_ = (current_ + 1) % endpoints_.size();
  }
  return common::Unavailable("etcd " + endpoints_[current_] + path + ": " + last_error);
}

common::Result<std::vector<EtcdRecords::Kv>> EtcdRecords::Range(const std::string& key,
                                                                bool prefix) {
  json req{{"key", Base64(key)}};
  if (prefix) req["range_end"] = Base64(PrefixEnd(key));
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/range", req.dump()));
  json reply = json::parse(text, nullptr, false);
  if (!reply.is_object()) return common::Unavailable("etcd answered a range with no JSON object");
  std::vector<Kv> out;
  const auto kvs = reply.find("kvs");
  if (kvs == reply.end()) return out;  // the gateway leaves an empty list out
  if (!kvs->is_array()) return common::Unavailable("etcd answered a range whose kvs is not a list");
  for (const json& kv : *kvs) {
    const std::optional<std::string> k = kv.is_object() ? Unbase64(StringField(kv, "key")) : std::nullopt;
    const std::optional<std::string> v = kv.is_object() ? Unbase64(StringField(kv, "value")) : std::nullopt;
    if (!k || !v) return common::Unavailable("etcd answered a key or value that is not base64");
    out.push_back(Kv{*k, *v, Int64Field(kv, "mod_revision")});
  }
  return out;
}

common::Result<bool> EtcdRecords::CompareAndPut(const std::string& key, int64_t revision,
                                                const std::string& value, int64_t lease) {
  json compare = revision == 0 ? json{{"key", Base64(key)}, {"target", "CREATE"},
                                      {"result", "EQUAL"}, {"create_revision", "0"}}
                               : json{{"key", Base64(key)}, {"target", "MOD"},
                                      {"result", "EQUAL"}, {"mod_revision", std::to_string(revision)}};
  json op;
  if (value.empty()) {
    op = {{"request_delete_range", {{"key", Base64(key)}}}};
  } else {
    json put{{"key", Base64(key)}, {"value", Base64(value)}};
    if (lease != 0) put["lease"] = std::to_string(lease);
    op = {{"request_put", put}};
  }
  json txn{{"compare", json::array({compare})}, {"success", json::array({op})}};
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/txn", txn.dump()));
  json reply = json::parse(text, nullptr, false);
  if (!reply.is_object()) return common::Unavailable("etcd answered a txn with no JSON object");
  const auto succeeded = reply.find("succeeded");  // left out when false
  return succeeded != reply.end() && succeeded->is_boolean() && succeeded->get<bool>();
}

std::string EtcdRecords::ItemKey(const std::string& dataset, const std::string& item) const {
  return prefix_ + "/items/" + dataset + "/" + item;
}

common::Status EtcdRecords::PutManifest(const std::string& dataset, const std::string& manifest) {
  std::lock_guard lock(mu_);
  const std::string prefix = prefix_ + "/manifests/" + dataset + "/";
  const std::vector<std::string> pieces = ManifestPieces(manifest);
  auto key = [&prefix](size_t i) {
    char index[24];
    std::snprintf(index, sizeof(index), "%08zu", i);
    return prefix + index;
  };
  // One put per piece (a request is capped at 1.5 MiB), then the old list's
  // extra pieces go. Every daemon of a dataset writes the same list.
  for (size_t i = 0; i < pieces.size(); ++i) {
    ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/put", json{{"key", Base64(key(i))},
                                                               {"value", Base64(pieces[i])}}.dump()));
    (void)text;
  }
  ASSIGN_OR_RETURN(std::string text,
                   Post("/v3/kv/deleterange", json{{"key", Base64(key(pieces.size()))},
                                                   {"range_end", Base64(PrefixEnd(prefix))}}.dump()));
  (void)text;
  return common::Status::Ok();
}

common::Result<std::string> EtcdRecords::Manifest(const std::string& dataset) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(prefix_ + "/manifests/" + dataset + "/", true));
  std::string out;
  for (const Kv& kv : kvs) out += kv.value;  // etcd returns keys in order
  return out;
}

common::Result<std::optional<ItemRecord>> EtcdRecords::Get(const std::string& dataset,
                                                           const std::string& item) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(ItemKey(dataset, item), false));
  if (kvs.empty()) return std::optional<ItemRecord>();
  ASSIGN_OR_RETURN(ItemRecord r, ParseItemRecord(kvs[0].value));
  return std::optional<ItemRecord>(std::move(r));
}

common::Result<std::vector<ItemRecord>> EtcdRecords::List(const std::string& dataset) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(prefix_ + "/items/" + dataset + "/", true));
  std::vector<ItemRecord> out;
  for (const Kv& kv : kvs) {
    auto r = ParseItemRecord(kv.value);
    if (r.ok()) {
      out.push_back(std::move(r).value());
    } else {
      CountMalformed(kv.key, r.status());
    }
  }
  return out;
}

common::Status EtcdRecords::AddHolder(const std::string& dataset, const ItemRecord& fresh,
                                      const Holder& holder,
                                      const std::function<size_t(const std::string&)>& rank) {
  std::lock_guard lock(mu_);
  const std::string key = ItemKey(dataset, fresh.item);
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(key, false));
    std::optional<ItemRecord> current;
    int64_t revision = 0;
    if (!kvs.empty()) {
      revision = kvs[0].mod_revision;
      auto parsed = ParseItemRecord(kvs[0].value);
      if (parsed.ok()) current = std::move(parsed).value();  // a bad record is replaced
    }
    const ItemRecord merged = MergeHolder(current, fresh, holder, rank);
    ASSIGN_OR_RETURN(bool done, CompareAndPut(key, revision, ToJson(merged), 0));
    if (done) return common::Status::Ok();
  }
  return common::Unavailable("etcd: " + key + " kept changing under " +
                             std::to_string(kCasAttempts) + " attempts to add " + holder.node);
}

common::Status EtcdRecords::RemoveHolder(const std::string& dataset, const std::string& item,
                                         const std::string& node) {
  std::lock_guard lock(mu_);
  const std::string key = ItemKey(dataset, item);
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(key, false));
    if (kvs.empty()) return common::Status::Ok();
    auto parsed = ParseItemRecord(kvs[0].value);
    std::optional<ItemRecord> rest;
    if (parsed.ok()) rest = WithoutHolder(std::move(parsed).value(), node);
    ASSIGN_OR_RETURN(bool done,
                     CompareAndPut(key, kvs[0].mod_revision, rest ? ToJson(*rest) : "", 0));
    if (done) return common::Status::Ok();
  }
  return common::Unavailable("etcd: " + key + " kept changing under " +
                             std::to_string(kCasAttempts) + " attempts to remove " + node);
}

common::Status EtcdRecords::PutNode(const NodeRecord& node, int ttl_s) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::string text, Post("/v3/lease/grant", json{{"TTL", ttl_s}}.dump()));
  json reply = json::parse(text, nullptr, false);
  lease_ = reply.is_object() ? Int64Field(reply, "ID") : 0;
  if (lease_ == 0) return common::Unavailable("etcd granted no lease: " + text.substr(0, 200));
  json put{{"key", Base64(prefix_ + "/nodes/" + node.node)},
           {"value", Base64(ToJson(node))},
           {"lease", std::to_string(lease_)}};
  ASSIGN_OR_RETURN(std::string put_reply, Post("/v3/kv/put", put.dump()));
  (void)put_reply;
  return common::Status::Ok();
}

common::Status EtcdRecords::KeepAlive() {
  std::lock_guard lock(mu_);
  if (lease_ == 0) return common::FailedPrecondition("no node record to keep alive");
  ASSIGN_OR_RETURN(std::string text,
                   Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease_)}}.dump()));
  // {"result":{"ID":"..","TTL":".."}}; a TTL of 0 (left out) means the lease expired.
  json reply = json::parse(text.substr(0, text.find('\n')), nullptr, false);
  const auto result = reply.is_object() ? reply.find("result") : reply.end();
  if (!reply.is_object() || result == reply.end() || Int64Field(*result, "TTL") <= 0) {
    return common::Unavailable("etcd: the node's lease expired");
  }
  return common::Status::Ok();
}

common::Status EtcdRecords::DropNode(const std::string& node) {
  std::lock_guard lock(mu_);
  if (lease_ != 0) {
    auto revoked = Post("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}}.dump());
    lease_ = 0;
    if (revoked.ok()) return common::Status::Ok();
  }
  ASSIGN_OR_RETURN(std::string text,
                   Post("/v3/kv/deleterange", json{{"key", Base64(prefix_ + "/nodes/" + node)}}.dump()));
  (void)text;
  return common::Status::Ok();
}

common::Result<std::vector<NodeRecord>> EtcdRecords::Nodes() {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::vector<Kv> kvs, Range(prefix_ + "/nodes/", true));
  std::vector<NodeRecord> out;
  for (const Kv& kv : kvs) {
    auto r = ParseNodeRecord(kv.value);
    if (r.ok()) {
      out.push_back(std::move(r).value());
    } else {
      CountMalformed(kv.key, r.status());
    }
  }
  return out;
}

}  // namespace aggswitch::cache
