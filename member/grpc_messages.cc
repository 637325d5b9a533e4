#include "member/grpc_messages.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "member/ps_plan.h"
#include "version/version.h"

namespace gradex::member {

namespace pb = ::gradex::v1;

// A heartbeat reports the step's oldest pending receive past this (why: in
// FillWait).
constexpr std::chrono::milliseconds kReportWaitsAfter(1000);
// A member's node (Member.host), as the coordinator bounds it at join.
constexpr size_t kMaxNodeBytes = 255;

absl::Status FromGrpc(const grpc::Status& s, const char* what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

absl::StatusOr<Plan> ToPlan(const pb::Plan& m, uint64_t version_offset) {
  Plan p;
  if (m.epoch() == 0 || m.epoch() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("plan epoch ", m.epoch(), " out of range"));
  }
  if (!(m.density() > 0 && m.density() <= 1) || m.teams() < 1 || m.barrier_period() < 1 ||
      m.step_deadline_ms() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", m.version(), ": bad parameters"));
  }
  p.version = version_offset + m.version();
  p.epoch = static_cast<uint32_t>(m.epoch());
  p.effective_step = m.effective_step();
  for (int i = 0; i < m.members_size(); ++i) {
    const pb::Member& mem = m.members(i);
    if (mem.rank() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", m.version(), ": member ", i, " has rank ", mem.rank()));
    }
    // The coordinator takes hosts of at most kMaxNodeBytes at join.
    if (mem.host().size() > kMaxNodeBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan ", m.version(), ": member ", i, " has a node of ", mem.host().size(), " bytes"));
    }
    p.members.push_back(
        {mem.rank(), mem.agent_id(), mem.ucx_address(), mem.role() == pb::ROLE_SERVER, mem.host()});
  }
  if (m.has_ps()) {
    absl::StatusOr<PsPlan> ps = ToPsPlan(m.ps(), p.members);
    if (!ps.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", m.version(), ": ", ps.status().message()));
    }
    p.ps = *std::move(ps);
  }
  p.algorithm = m.algorithm();
  p.density = m.density();
  p.teams = m.teams();
  for (const pb::KPrime& k : m.kprime()) {
    if (k.bucket() >= 4096 || k.team_position() < 0 || k.team_position() > 65535) continue;
    if (p.kprime.size() <= k.bucket()) p.kprime.resize(k.bucket() + 1);
    auto& row = p.kprime[k.bucket()];
    if (row.size() <= static_cast<size_t>(k.team_position())) row.resize(k.team_position() + 1);
    row[k.team_position()] = k.kprime();
  }
  p.tau = m.barrier_period();
  if (m.params_size() > static_cast<int>(catalog::kMaxParams)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan ", m.version(), ": ", m.params_size(), " parameters"));
  }
  for (const auto& [name, value] : m.params()) {
    if (name.empty() || name.size() > catalog::kMaxParamNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", m.version(), ": parameter name of ", name.size(), " bytes"));
    }
    p.params.emplace(name, value);
  }
  // Per-bucket algorithms: bounded and named from the catalog, else the
  // whole plan is refused (a rank must never run a name its peers lack).
  if (m.bucket_algorithms_size() > static_cast<int>(catalog::kMaxBucketAlgorithms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan ", m.version(), ": ", m.bucket_algorithms_size(), " bucket algorithms"));
  }
  p.bucket_algorithms.assign(m.bucket_algorithms().begin(), m.bucket_algorithms().end());
  if (absl::Status st = catalog::CheckBucketAlgorithms(p.bucket_algorithms); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", m.version(), ": ", st.message()));
  }
  // The parameters: each one of an algorithm in play (the plan's or a
  // bucket's), valid for every one that reads it.
  if (catalog::Find(p.algorithm) != nullptr) {
    if (absl::Status st = catalog::CheckParamsInPlay(
            catalog::AlgorithmsInPlay(p.algorithm, p.bucket_algorithms), p.params);
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", m.version(), ": ", st.message()));
    }
  }
  p.step_deadline = std::chrono::milliseconds(m.step_deadline_ms());
  p.entry_timeout = std::chrono::milliseconds(m.entry_timeout_ms());
  p.measure_links = m.measure_links();
  return p;
}

pb::StepReport ToProto(const StepReport& r, uint64_t member, const std::string& secret) {
  pb::StepReport m;
  m.set_member_id(member);
  m.set_member_secret(secret);
  m.set_epoch(r.epoch);
  m.set_step(r.step);
  m.set_selection_seconds(r.selection_s);
  m.set_communication_seconds(r.communication_s);
  m.set_reduction_seconds(r.reduction_s);
  m.set_total_seconds(r.total_s);
  m.set_compute_seconds(r.compute_s);
  m.set_comm_start_unix_ns(r.comm_start_unix_ns);
  m.set_comm_end_unix_ns(r.comm_end_unix_ns);
  m.set_sent_bytes(r.sent_bytes);
  m.set_recv_bytes(r.recv_bytes);
  for (size_t b = 0; b < r.buckets.size() && b < 4096; ++b) {
    pb::BucketReport* br = m.add_buckets();
    br->set_bucket(static_cast<uint32_t>(b));
    br->set_elements(r.buckets[b].elements);
    br->set_team_position(r.buckets[b].team_position);
    br->set_kprime_used(r.buckets[b].kprime_used);
    br->set_post_gather_count(r.buckets[b].post_gather_count);
    br->set_result_nnz(r.buckets[b].result_nnz);
    br->set_algorithm(r.buckets[b].algorithm.substr(0, catalog::kMaxParamNameBytes));
    br->set_seconds(r.buckets[b].seconds);
    br->set_dense_probe(r.buckets[b].dense_probe);
  }
  if (!r.ok) m.set_error(r.error.empty() ? "failed" : r.error.substr(0, 512));
  if (!r.ok && r.blamed_rank >= 0)
    m.set_blamed_rank_plus_one(static_cast<uint32_t>(r.blamed_rank) + 1);
  if (r.link) {
    m.mutable_link()->set_alpha_seconds(r.link->alpha_s);
    m.mutable_link()->set_beta_seconds_per_byte(r.link->beta_s_per_byte);
    m.mutable_link()->set_samples(r.link->samples);
  }
  return m;
}

pb::JoinRequest JoinToProto(const JoinRequest& j, uint64_t next_step) {
  pb::JoinRequest req;
  req.set_job_id(j.job);
  req.set_agent_id(j.agent_id);
  req.set_host(j.host);
  req.set_local_rank(j.local_rank);
  req.set_device(j.device);
  req.set_ucx_address(j.ucx_address);
  req.set_ucx_version(j.ucx_version);
  req.set_ucx_transports(j.ucx_transports);
  req.set_last_epoch(j.last_epoch);
  req.set_last_rank(std::max(j.last_rank, 0));
  req.set_last_world_size(j.last_world_size);
  req.set_next_step(std::max(j.next_step, next_step));
  req.set_role(j.server ? pb::ROLE_SERVER : pb::ROLE_WORKER);
  req.set_gradex_version(version::Version());
  req.set_wire_protocol(version::kWireProtocol);
  return req;
}

void FillWait(const WaitSource& w, pb::HeartbeatRequest* req) {
  // The epoch actually run, not the newest plan's: a member still in an
  // older epoch is what the coordinator's hang diagnosis names.
  if (uint32_t e = w.running_epoch(); e != 0) req->set_epoch(e);
  // Only a wait longer than any healthy one: a step's receives complete
  // in milliseconds, and a straggler's compute jitter is well under a
  // second, while step deadlines are seconds; so a stalled step shows
  // up well before the waiters give up, and healthy ones send nothing.
  if (std::optional<WaitInfo> info = w.OldestWait(kReportWaitsAfter)) {
    pb::WaitState* ws = req->mutable_waiting();
    ws->set_epoch(info->epoch);
    ws->set_step(info->step);
    ws->set_peer_rank(info->peer);
    ws->set_waited_ms(static_cast<uint32_t>(
        std::min<int64_t>(info->waited.count(), std::numeric_limits<uint32_t>::max())));
  }
}

bool LooksLikeTlsRefusal(const GrpcControlPlaneOptions& options, const absl::Status& s) {
  if (options.tls_ca.empty() || s.code() != absl::StatusCode::kUnavailable) return false;
  for (absl::string_view sign : {"Socket closed", "andshake", "SSL", "certificate"}) {
    if (absl::StrContains(s.message(), sign)) return true;
  }
  return false;
}

absl::Status TlsRefused(const GrpcControlPlaneOptions& options, const absl::Status& s) {
  return absl::UnauthenticatedError(
      absl::StrCat("TLS handshake refused by the coordinator at ", options.target,
                   options.tls_client_cert.empty()
                       ? ": it closed the session; under mutual TLS it needs a client certificate "
                         "(--tls-cert/--tls-key)"
                       : ": it closed the session; it does not accept this client certificate",
                   " (", s.message(), ")"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CoordinatorChannel(
    const GrpcControlPlaneOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("no coordinator address");
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_ca.empty()) {
    if (!options.tls_server_name.empty()) {
      return absl::InvalidArgumentError("a TLS server name needs the coordinator's CA");
    }
    if (!options.tls_client_cert.empty()) {
      return absl::InvalidArgumentError("a client certificate needs the coordinator's CA");
    }
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca;
    ssl.pem_cert_chain = options.tls_client_cert;
    ssl.pem_private_key = options.tls_client_key;
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);  // a plan carries every member's address
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  // gRPC's reconnect backoff bounds how soon a coordinator that is back is
  // seen (the agent waits on the channel, see AwaitChannel): retry the
  // connection within 1 s (x1.2 jitter) of it listening again. A dead
  // coordinator costs each agent one refused connect per second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(options.target, creds, args);
}

}  // namespace gradex::member
