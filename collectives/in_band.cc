#include "collectives/in_band.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradex::collectives {

absl::Status InBand::Barrier(transport::Deadline deadline) {
  auto r = AllGather(0, deadline);
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::vector<uint64_t>> InBand::AllGather(uint64_t value,
                                                        transport::Deadline deadline) {
  const uint64_t tag = kInBandTagBase | seq_++;
  const int p = t_.size();
  const int me = t_.rank();
  std::vector<uint64_t> out(p, 0);
  out[me] = value;
  std::vector<transport::RequestId> recvs(p, 0), sends;
  absl::Status status;
  for (int peer = 0; peer < p && status.ok(); ++peer) {
    if (peer == me) continue;
    auto r = t_.PostRecvAtMost(peer, tag, sizeof value);  // exactly one value
    if (!r.ok()) {
      status = r.status();
      break;
    }
    recvs[peer] = *r;
    transport::Bytes payload(sizeof value);
    std::memcpy(payload.data(), &value, sizeof value);
    auto s = t_.PostSend(peer, tag, std::move(payload));
    if (!s.ok()) {
      status = s.status();
      break;
    }
    sends.push_back(*s);
  }
  for (int peer = 0; peer < p && status.ok(); ++peer) {
    if (peer == me) continue;
    transport::Bytes msg;
    status = t_.Wait(recvs[peer], deadline, &msg);
    if (status.ok() && msg.size() != sizeof value) {
      status = absl::DataLossError(
          absl::StrCat("bench all-gather: ", msg.size(), " bytes from rank ", peer));
    }
    if (status.ok()) std::memcpy(&out[peer], msg.data(), sizeof value);
  }
  for (size_t i = 0; i < sends.size() && status.ok(); ++i) {
    status = t_.Wait(sends[i], deadline, nullptr);
  }
  if (!status.ok()) {
    // Nothing may reference our buffers once we return.
    t_.CancelAll(transport::DeadlineIn(std::chrono::milliseconds(1000)));
    return absl::Status(status.code(), absl::StrCat("bench all-gather: ", status.message()));
  }
  return out;
}

}  // namespace gradex::collectives
