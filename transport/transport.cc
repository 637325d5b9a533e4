#include "transport/transport.h"

#include <algorithm>
#include <chrono>

namespace gradex::transport {

// After a failure the other request is cancelled within a short budget, not
// the call's whole deadline: a send to a dead or stopped peer cannot be
// cancelled (UCX keeps it, the transport reclaims it later), and waiting the
// step deadline for it undid an eviction's preemption.
constexpr std::chrono::milliseconds kCancelBudget(1000);

absl::StatusOr<Bytes> SendRecv(Transport& t, int to, uint64_t send_tag, Bytes payload, int from,
                               uint64_t recv_tag, Deadline deadline, size_t capacity) {
  const auto cancel_by = [&] { return std::min(deadline, DeadlineIn(kCancelBudget)); };
  absl::StatusOr<RequestId> recv = capacity == SIZE_MAX
                                       ? t.PostRecv(from, recv_tag)
                                       : t.PostRecvAtMost(from, recv_tag, capacity);
  if (!recv.ok()) return recv.status();
  absl::StatusOr<RequestId> send = t.PostSend(to, send_tag, std::move(payload));
  if (!send.ok()) {
    t.CancelAll(cancel_by());
    return send.status();
  }
  Bytes in;
  absl::Status s = t.Wait(*recv, deadline, &in);
  if (!s.ok()) {
    t.CancelAll(cancel_by());
    return s;
  }
  s = t.Wait(*send, deadline, nullptr);
  if (!s.ok()) {
    t.CancelAll(cancel_by());
    return s;
  }
  return in;
}

}  // namespace gradex::transport
