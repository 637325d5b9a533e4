#include "transport/transport.h"

namespace gradex {

absl::StatusOr<Bytes> SendRecv(Transport& t, int to, uint64_t send_tag, Bytes payload, int from,
                               uint64_t recv_tag, Deadline deadline) {
  absl::StatusOr<RequestId> recv = t.PostRecv(from, recv_tag);
  if (!recv.ok()) return recv.status();
  absl::StatusOr<RequestId> send = t.PostSend(to, send_tag, std::move(payload));
  if (!send.ok()) {
    t.CancelAll(deadline);
    return send.status();
  }
  Bytes in;
  absl::Status s = t.Wait(*recv, deadline, &in);
  if (!s.ok()) {
    t.CancelAll(deadline);
    return s;
  }
  s = t.Wait(*send, deadline, nullptr);
  if (!s.ok()) {
    t.CancelAll(deadline);
    return s;
  }
  return in;
}

}  // namespace gradex
