#include "platform/config.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "platform/fabric.h"

namespace farm {
namespace {

// Collects the first text-format error with its position.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

absl::Status ValidateAndComplete(config::ClusterConfig* c) {
  if (c->provider().empty()) c->set_provider("auto");
  if (absl::Status s = CheckProvider(c->provider()); !s.ok()) return s;
  if (c->endpoint().empty()) c->set_endpoint("auto");
  if (absl::StatusOr<EndpointType> e = ParseEndpointType(c->endpoint()); !e.ok()) {
    return e.status();
  }
  if (c->region_size() == 0) c->set_region_size(kDefaultRegionSize);
  if (c->region_count() == 0) c->set_region_count(kDefaultRegionCount);
  if (c->join_timeout_s() == 0) c->set_join_timeout_s(kDefaultJoinTimeoutS);
  if (!c->has_lock_memory()) c->set_lock_memory(true);
  if (c->lease_ms() == 0) c->set_lease_ms(kDefaultLeaseMs);
  if (c->lease_ms() < kMinLeaseMs || c->lease_ms() > 600000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_ms ", c->lease_ms(), " is out of range (", kMinLeaseMs,
        " .. 600000; a lease shorter than the heartbeats' round trips under load evicts healthy "
        "nodes that are merely slow: measure it with txn_bench --lease_ms)"));
  }
  if (c->region_size() % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region_size ", c->region_size(), " is not a multiple of 4096"));
  }
  if (c->region_size() < 65536 || c->region_size() > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("region_size ", c->region_size(), " is out of range (64 KiB .. 1 TiB)"));
  }
  if (c->region_count() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("region_count ", c->region_count(), " is too large (at most 4096)"));
  }
  if (c->node_size() == 0) {
    return absl::InvalidArgumentError("the configuration lists no node");
  }
  std::set<uint32_t> ids;
  std::set<std::pair<std::string, uint32_t>> ports;
  for (const config::NodeConfig& n : c->node()) {
    if (n.id() > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("node id ", n.id(), " is above 65535"));
    }
    if (!ids.insert(n.id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("node id ", n.id(), " is listed twice"));
    }
    if (n.host().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("node ", n.id(), " has no host"));
    }
    if (n.control_port() == 0 || n.control_port() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", n.id(), " has an invalid control_port ", n.control_port()));
    }
    if (!ports.insert({n.host(), n.control_port()}).second) {
      return absl::InvalidArgumentError(absl::StrCat("node ", n.id(), " reuses control address ",
                                                     n.host(), ":", n.control_port()));
    }
  }
  if (!c->has_cm_node_id()) c->set_cm_node_id(c->node(0).id());
  const config::NodeConfig* cm = FindNode(*c, c->cm_node_id());
  if (cm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cm_node_id ", c->cm_node_id(), " is not a listed node"));
  }
  if (cm->late()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node ", cm->id(), " is the configuration manager and cannot be late"));
  }
  return CheckReplication(c);
}

absl::Status CheckReplication(config::ClusterConfig* c) {
  // The failure domains of the nodes that form the cluster, with their nodes.
  std::map<std::string, std::vector<uint32_t>> domains;
  for (const config::NodeConfig& n : c->node()) {
    if (!n.late()) domains[FailureDomainOf(n)].push_back(n.id());
  }
  if (!c->has_f()) c->set_f(domains.size() >= kDefaultFMinDomains ? kDefaultF : 0);
  if (c->f() > kMaxF) {
    return absl::InvalidArgumentError(
        absl::StrCat("f ", c->f(), " is out of range (0 .. ", kMaxF, " backups per region)"));
  }
  if (c->f() + 1 <= domains.size()) return absl::OkStatus();
  std::vector<std::string> listed;
  for (const auto& [domain, ids] : domains) {
    listed.push_back(absl::StrCat("'", domain, "' (node", ids.size() > 1 ? "s " : " ",
                                  absl::StrJoin(ids, ", "), ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "f ", c->f(), " keeps ", c->f() + 1,
      " copies of every region in distinct failure domains, but the nodes that form the cluster "
      "are in ", domains.size(), ": ", absl::StrJoin(listed, ", "),
      ". Give nodes their own failure_domain (a host each; on a single host, a process each, "
      "which then tolerates process failures only), add nodes, or lower f (f: 0 is no fault "
      "tolerance)"));
}

std::string FailureDomainOf(const config::NodeConfig& n) {
  return n.failure_domain().empty() ? absl::StrCat("host ", n.host()) : n.failure_domain();
}

absl::StatusOr<config::ClusterConfig> ParseClusterConfig(absl::string_view text,
                                                         absl::string_view origin) {
  config::ClusterConfig c;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &c)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not a valid cluster configuration: ", errors.first()));
  }
  absl::Status s = ValidateAndComplete(&c);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  return c;
}

absl::StatusOr<config::ClusterConfig> LoadClusterConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read configuration file ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseClusterConfig(buf.str(), path);
}

const config::NodeConfig* FindNode(const config::ClusterConfig& c, uint32_t id) {
  for (const config::NodeConfig& n : c.node()) {
    if (n.id() == id) return &n;
  }
  return nullptr;
}

uint64_t Fingerprint(const config::ClusterConfig& c) {
  std::string bytes;
  google::protobuf::io::StringOutputStream out(&bytes);
  // Deterministic serialization keeps the hash stable across processes.
  {
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    c.SerializeToCodedStream(&coded);
  }
  // FNV-1a: absl::Hash is seeded per process, so it cannot be compared across nodes.
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : bytes) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

std::string ToText(const config::ClusterConfig& c) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(c, &text);
  return text;
}

}  // namespace farm
