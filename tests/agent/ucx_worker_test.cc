// One UCX worker carrying two communicators one after the other (as an agent
// does across epochs): a message the first one left unreceived must never be
// matched by the second.
#include <gtest/gtest.h>

#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "transport/ucx_transport.h"

namespace gradex {
namespace {

TEST(UcxWorkerTest, StaleMessagesOfAnEarlierGenerationAreDropped) {
  UcxOptions options;
  options.tls = "tcp";
  std::vector<std::string> addresses(2);
  std::barrier sync(2);
  std::vector<std::string> got(2);
  auto rank = [&](int r) {
    absl::StatusOr<std::shared_ptr<UcxWorker>> worker = CreateUcxWorker(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    addresses[r] = (*worker)->address();
    sync.arrive_and_wait();
    for (uint32_t generation : {1u, 2u}) {
      absl::StatusOr<std::unique_ptr<Transport>> t =
          ConnectUcxTransport(*worker, r, addresses, generation, options);
      ASSERT_TRUE(t.ok()) << t.status();
      const Deadline deadline = DeadlineIn(std::chrono::milliseconds(10000));
      if (r == 0) {
        std::string text = generation == 1 ? "stale" : "fresh";
        absl::StatusOr<RequestId> id = (*t)->PostSend(1, 5, Bytes(text.begin(), text.end()));
        ASSERT_TRUE(id.ok());
        ASSERT_TRUE((*t)->Wait(*id, deadline, nullptr).ok());
      } else if (generation == 2) {
        absl::StatusOr<RequestId> id = (*t)->PostRecv(0, 5);
        ASSERT_TRUE(id.ok());
        Bytes in;
        ASSERT_TRUE((*t)->Wait(*id, deadline, &in).ok());
        got[r].assign(in.begin(), in.end());
      }
      // Generation 1's message is delivered to rank 1's worker before both
      // move on, and nobody receives it.
      std::this_thread::sleep_for(std::chrono::milliseconds(generation == 1 ? 200 : 0));
      sync.arrive_and_wait();
      t->reset();
      sync.arrive_and_wait();
    }
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
  EXPECT_EQ(got[1], "fresh");
}

TEST(UcxWorkerTest, OneCommunicatorAtATime) {
  UcxOptions options;
  options.tls = "tcp";
  absl::StatusOr<std::shared_ptr<UcxWorker>> worker = CreateUcxWorker(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::vector<std::string> one = {(*worker)->address()};
  absl::StatusOr<std::unique_ptr<Transport>> t = ConnectUcxTransport(*worker, 0, one, 1, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(ConnectUcxTransport(*worker, 0, one, 2, options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  t->reset();
  EXPECT_TRUE(ConnectUcxTransport(*worker, 0, one, 2, options).ok());
  std::vector<std::string> two = {(*worker)->address(), ""};
  EXPECT_EQ(ConnectUcxTransport(*worker, 0, two, 3, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex
