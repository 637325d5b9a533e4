#include "services/coordinator/validate.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "services/coordinator/limits.h"

namespace gradex::coordinator {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status CheckLength(absl::string_view field, absl::string_view v, size_t lo, size_t hi) {
  if (v.size() < lo || v.size() > hi) {
    return Bad(field, absl::StrCat("length ", v.size(), " outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

bool Printable(absl::string_view v) {
  for (unsigned char c : v) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// What transport/ucx/sockaddr.h accepts (the coordinator does not link the
// transport): a numeric IP and a port 1..65535, nothing to resolve.
bool IsDataAddress(absl::string_view a) {
  const size_t colon = a.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 >= a.size() || a.size() - colon > 6) {
    return false;
  }
  uint32_t port = 0;
  for (char c : a.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port < 1 || port > 65535) return false;
  std::string host(a.substr(0, colon));
  unsigned char buf[sizeof(in6_addr)];
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1;
  }
  return inet_pton(AF_INET, host.c_str(), buf) == 1 && host != "0.0.0.0";
}

bool IsUcxVersion(absl::string_view v) {
  if (v.empty() || v.size() > kMaxUcxVersionBytes) return false;
  int dots = 0;
  for (char c : v) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 1 && v.front() != '.' && v.back() != '.';
}

absl::Status CheckSeconds(absl::string_view field, double v) {
  // Also rejects NaN; a day bounds any sane step phase.
  if (!(v >= 0 && v <= 86400)) return Bad(field, "must be a duration in [0, 86400] seconds");
  return absl::OkStatus();
}

}  // namespace

bool IsValidJobId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxJobIdBytes) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateJoin(const gradex::v1::JoinRequest& r) {
  if (!IsValidJobId(r.job_id())) return Bad("job_id", "must be 1..128 bytes of [A-Za-z0-9._-]");
  if (absl::Status s = CheckLength("agent_id", r.agent_id(), 1, kMaxAgentIdBytes); !s.ok())
    return s;
  if (!Printable(r.agent_id())) return Bad("agent_id", "must be printable ASCII");
  if (absl::Status s = CheckLength("host", r.host(), 1, kMaxHostBytes); !s.ok()) return s;
  if (!Printable(r.host())) return Bad("host", "must be printable ASCII");
  if (absl::Status s = CheckLength("device", r.device(), 0, kMaxDeviceBytes); !s.ok()) return s;
  if (!Printable(r.device())) return Bad("device", "must be printable ASCII");
  if (absl::Status s = CheckLength("ucx_address", r.ucx_address(), 1, kMaxUcxAddressBytes);
      !s.ok()) {
    return s;
  }
  if (!IsDataAddress(r.ucx_address())) {
    return Bad("ucx_address", "must be a data-plane listener, IPv4:port or [IPv6]:port");
  }
  if (!IsUcxVersion(r.ucx_version())) return Bad("ucx_version", "required, MAJOR.MINOR");
  if (absl::Status s = CheckLength("ucx_transports", r.ucx_transports(), 1, kMaxUcxTransportsBytes);
      !s.ok()) {
    return s;
  }
  if (!Printable(r.ucx_transports())) return Bad("ucx_transports", "must be printable ASCII");
  if (r.local_rank() < 0 || r.local_rank() > kMaxLocalRank) return Bad("local_rank", "0..65535");
  if (!gradex::v1::Role_IsValid(r.role())) return Bad("role", "ROLE_WORKER or ROLE_SERVER");
  if (absl::Status s = CheckLength("gradex_version", r.gradex_version(), 0, 64); !s.ok()) return s;
  if (!Printable(r.gradex_version())) return Bad("gradex_version", "must be printable ASCII");
  if (r.member_secret().size() > kMaxMemberSecretBytes)
    return Bad("member_secret", "over 64 bytes");
  if (r.last_epoch() > 0) {
    if (r.last_world_size() < 1 || r.last_world_size() > kMaxWorldSize) {
      return Bad("last_world_size", "1..65536 when last_epoch is set");
    }
    if (r.last_rank() < 0 || r.last_rank() >= r.last_world_size()) {
      return Bad("last_rank", "must be in [0, last_world_size)");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHeartbeat(const gradex::v1::HeartbeatRequest& r) {
  if (r.member_id() == 0) return Bad("member_id", "required");
  if (r.member_secret().size() > kMaxMemberSecretBytes)
    return Bad("member_secret", "over 64 bytes");
  if (r.has_waiting()) {
    const gradex::v1::WaitState& w = r.waiting();
    if (w.epoch() == 0) return Bad("waiting.epoch", "required (a step waits in an epoch)");
    if (w.peer_rank() < 0 || w.peer_rank() >= kMaxWorldSize) {
      return Bad("waiting.peer_rank", "0..65535");
    }
    // A day bounds any wait (as the report's durations); epoch or step
    // consistency with the roster is the stall diagnosis's to judge.
    if (w.waited_ms() > 86400u * 1000u) return Bad("waiting.waited_ms", "over a day");
  }
  return absl::OkStatus();
}

absl::Status ValidateLeave(const gradex::v1::LeaveRequest& r) {
  if (r.member_id() == 0) return Bad("member_id", "required");
  if (r.member_secret().size() > kMaxMemberSecretBytes)
    return Bad("member_secret", "over 64 bytes");
  return CheckLength("reason", r.reason(), 0, kMaxReasonBytes);
}

absl::Status ValidateWatch(const gradex::v1::WatchPlanRequest& r) {
  if (r.member_id() == 0) return Bad("member_id", "required");
  if (r.member_secret().size() > kMaxMemberSecretBytes)
    return Bad("member_secret", "over 64 bytes");
  return absl::OkStatus();
}

absl::Status ValidateReport(const gradex::v1::StepReport& r) {
  if (r.member_id() == 0) return Bad("member_id", "required");
  if (r.member_secret().size() > kMaxMemberSecretBytes)
    return Bad("member_secret", "over 64 bytes");
  if (r.epoch() == 0) return Bad("epoch", "required (steps run in an epoch)");
  for (auto [name, v] : {std::pair{"selection_seconds", r.selection_seconds()},
                         {"communication_seconds", r.communication_seconds()},
                         {"reduction_seconds", r.reduction_seconds()},
                         {"total_seconds", r.total_seconds()},
                         {"compute_seconds", r.compute_seconds()}}) {
    if (absl::Status s = CheckSeconds(name, v); !s.ok()) return s;
  }
  if (r.comm_end_unix_ns() < r.comm_start_unix_ns()) {
    return Bad("comm_end_unix_ns", "before comm_start_unix_ns");
  }
  if (r.has_link()) {
    // The proto's ranges (the comparisons also reject NaN).
    const gradex::v1::LinkEstimate& l = r.link();
    if (!(l.alpha_seconds() > 0 && l.alpha_seconds() < 10)) {
      return Bad("link.alpha_seconds", "(0, 10)");
    }
    if (!(l.beta_seconds_per_byte() >= 0 && l.beta_seconds_per_byte() < 1e-3)) {
      return Bad("link.beta_seconds_per_byte", "[0, 1e-3)");
    }
    if (l.samples() < 1) return Bad("link.samples", ">= 1");
  }
  if (absl::Status s = CheckLength("error", r.error(), 0, kMaxErrorBytes); !s.ok()) return s;
  if (static_cast<size_t>(r.buckets_size()) > kMaxBuckets) return Bad("buckets", "over 4096");
  size_t total_boundaries = 0;
  for (const auto& b : r.buckets()) {
    if (b.bucket() >= kMaxBuckets) return Bad("buckets.bucket", "must be < 4096");
    if (b.elements() == 0 || b.elements() > UINT32_MAX) {
      return Bad("buckets.elements", "must be 1..2^32-1 (indices are uint32)");
    }
    if (b.team_position() < 0 || b.team_position() >= kMaxWorldSize) {
      return Bad("buckets.team_position", "0..65535");
    }
    if (b.kprime_used() > b.elements() || b.post_gather_count() > b.elements() ||
        b.result_nnz() > b.elements()) {
      return Bad("buckets", "counts cannot exceed elements");
    }
    // What ran: a name of at most 64 bytes (the bucket controller uses only
    // catalog names and ignores others) and a duration like the step's.
    if (b.algorithm().size() > kMaxAlgorithmBytes) return Bad("buckets.algorithm", "over 64 bytes");
    if (absl::Status s = CheckSeconds("buckets.seconds", b.seconds()); !s.ok()) return s;
    size_t nb = static_cast<size_t>(b.local_boundaries_size());
    if (nb > kMaxBoundariesPerBucket) return Bad("buckets.local_boundaries", "over 65535");
    total_boundaries += nb;
    uint32_t prev = 0;
    for (uint32_t v : b.local_boundaries()) {
      if (v < prev || v > b.elements()) {
        return Bad("buckets.local_boundaries", "must be nondecreasing and <= elements");
      }
      prev = v;
    }
  }
  if (total_boundaries > kMaxBoundariesPerReport) {
    return Bad("buckets.local_boundaries", "over 1048576 values in one report");
  }
  return absl::OkStatus();
}

}  // namespace gradex::coordinator
