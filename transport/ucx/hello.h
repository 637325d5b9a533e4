// The data plane's front door: each UCX worker's published address
// ("IP:port", sockaddr.h) is a TCP listener of ours, not UCX's. A peer
// connects, proves it holds the job's secret (an HMAC-SHA256 over both sides'
// nonces, keyed by the token), and gets the worker's packed UCX address,
// signed the same way; it then opens its endpoint from that address. No byte
// from the network reaches UCX's connection manager: UCX 1.13's sockaddr
// listener asserted (and aborted the process) on 17 zero bytes from anyone
// who could reach its port.
//
// Wire (all sizes fixed except the address):
//   server -> client  "GXH1" | Ns (16 random bytes)
//   client -> server  "GXH1" | Nc (16) | HMAC(key, "client" | Ns | Nc)
//   server -> client  len (u32 little endian) | HMAC(key, "server" | Nc | Ns | len | addr) | addr
// A client whose proof fails is closed without an answer.
#ifndef GRADEX_TRANSPORT_UCX_HELLO_H_
#define GRADEX_TRANSPORT_UCX_HELLO_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/transport.h"
#include "transport/ucx/sockaddr.h"

namespace gradex::transport::ucx {

// The longest packed UCX worker address a client accepts (a worker with
// every transport of a large node is a few KiB).
inline constexpr size_t kMaxWorkerAddressBytes = 64 * 1024;

// Serves `blob` (the worker's packed address) to clients that prove the
// secret, on a thread of its own. At most kMaxClients hellos at once, each
// closed kHelloTimeout after it connected; past the cap a connection is
// closed at once (the honest client retries).
class HelloServer {
 public:
  static constexpr int kMaxClients = 64;
  static constexpr std::chrono::milliseconds kHelloTimeout{2000};

  // Binds `ip`:0 (the kernel picks the port) and starts serving.
  static absl::StatusOr<std::unique_ptr<HelloServer>> Start(const std::string& ip, std::string blob,
                                                            std::string secret);
  ~HelloServer();
  // "IP:port" of the listener.
  const std::string& address() const { return address_; }
  void SetSecret(std::string secret);
  // Connections closed without an answer: bad magic or proof, or silent
  // past kHelloTimeout, or over kMaxClients.
  uint64_t refused() const { return refused_.load(); }
  uint64_t answered() const { return answered_.load(); }

 private:
  HelloServer() = default;
  void Serve();

  int listen_fd_ = -1;
  std::string address_;
  std::string blob_;
  std::mutex mu_;
  std::string secret_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0}, answered_{0};
  std::thread thread_;
};

// One client hello, driven without blocking (Step) so that a wire-up can
// poll every peer's together with its other waits.
class HelloClient {
 public:
  HelloClient(DataAddress peer, std::string secret);
  ~HelloClient();
  HelloClient(const HelloClient&) = delete;
  HelloClient& operator=(const HelloClient&) = delete;

  // Advances as far as the socket allows. Returns OK while under way or done
  // (done() tells), an error when the peer cannot be trusted or reached:
  // nothing listens, a reply that is not a hello, a proof that fails. A
  // connection the server closed before greeting (its cap) is retried.
  absl::Status Step();
  bool done() const { return state_ == kDone; }
  // The peer's packed UCX worker address, once done().
  const std::string& blob() const { return blob_; }

 private:
  enum State { kConnecting, kGreeting, kReply, kDone };
  absl::Status Restart();
  // Reads into in_ up to `want` bytes; false on EOF or error (errno kept).
  bool ReadUpTo(size_t want, bool* eof);

  DataAddress peer_;
  std::string secret_;
  int fd_ = -1;
  State state_ = kConnecting;
  std::string in_;
  std::string ns_, nc_;
  std::string blob_;
  Clock::time_point retry_at_{};
};

}  // namespace gradex::transport::ucx

#endif  // GRADEX_TRANSPORT_UCX_HELLO_H_
