// The transport conformance fixture (conformance_test.cc holds the suite,
// conformance_caps_test.cc the per-receive capacity cases): every Transport
// (loopback, the simulator, loopback behind ForwardingTransport, UCX over
// several transport sets) for world sizes 1..5.
#ifndef GRADEX_TESTS_TRANSPORT_CONFORMANCE_H_
#define GRADEX_TESTS_TRANSPORT_CONFORMANCE_H_

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/transport/test_util.h"
#include "transport/forwarding_transport.h"
#include "transport/loopback_transport.h"
#include "transport/sim_transport.h"
#include "transport/transport.h"
#ifdef GRADEX_TEST_UCX
#include "tests/transport/ucx_world.h"
#endif

namespace gradex::testing {

using std::chrono::milliseconds;

inline constexpr milliseconds kStepTimeout{20000};

struct BackendParam {
  std::string backend;  // "loopback", "sim", "forwarding" (loopback wrapped) or "ucx"
  std::string tls;      // UCX_TLS override for "ucx"
  int size;
};

inline void PrintTo(const BackendParam& p, std::ostream* os) {
  *os << p.backend << (p.tls.empty() ? "" : "/") << p.tls << " P=" << p.size;
}

inline std::string ParamName(const ::testing::TestParamInfo<BackendParam>& info) {
  std::string tls = info.param.tls;
  std::replace_if(
      tls.begin(), tls.end(), [](char c) { return !isalnum(c); }, '_');
  return absl::StrCat(info.param.backend, tls.empty() ? "" : "_", tls, "_P", info.param.size);
}

class TransportConformance : public ::testing::TestWithParam<BackendParam> {
 protected:
  int P() const { return GetParam().size; }

  // Runs `body` on every rank of a fresh world; fails the test on any error.
  void Run(const RankBody& body) {
    std::vector<absl::Status> st = RunStatuses(body);
    for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  }

  std::vector<absl::Status> RunStatuses(const RankBody& body) {
    const BackendParam& p = GetParam();
    if (p.backend == "loopback" || p.backend == "sim" || p.backend == "forwarding") {
      auto ts = std::make_shared<std::vector<std::unique_ptr<transport::Transport>>>(
          p.backend == "sim" ? transport::CreateSimTransports(p.size, transport::SimParams{})
                             : transport::CreateLoopbackTransports(p.size));
      for (auto& t : *ts) {
        if (p.backend == "forwarding")
          t = std::make_unique<transport::ForwardingTransport>(std::move(t));
      }
      return RunWorld(
          p.size,
          [ts](int r, int, std::shared_ptr<InProcessExchange>)
              -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
            return std::move((*ts)[r]);
          },
          body);
    }
#ifdef GRADEX_TEST_UCX
    transport::ucx::UcxOptions opt;
    opt.tls = p.tls;
    opt.connect_timeout = milliseconds(20000);
    return RunUcxWorld(p.size, opt, body);
#else
    return std::vector<absl::Status>(p.size, absl::UnimplementedError(p.backend));
#endif
  }
};

// Waits for every request, collecting received payloads by request id order.
inline absl::Status WaitAll(transport::Transport& t, const std::vector<transport::RequestId>& ids,
                            std::vector<transport::Bytes>* out, transport::Deadline deadline) {
  if (out != nullptr) out->assign(ids.size(), transport::Bytes());
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::Status s = t.Wait(ids[i], deadline, out == nullptr ? nullptr : &(*out)[i]);
    if (!s.ok()) {
      t.CancelAll(deadline);
      return s;
    }
  }
  return absl::OkStatus();
}

inline absl::Status Check(const std::string& problem) {
  return problem.empty() ? absl::OkStatus() : absl::InternalError(problem);
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_TRANSPORT_CONFORMANCE_H_
