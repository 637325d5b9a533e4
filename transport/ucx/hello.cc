#include "transport/ucx/hello.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gradex::transport::ucx {
namespace {

constexpr char kMagic[4] = {'G', 'X', 'H', '1'};
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;
constexpr size_t kGreetingBytes = sizeof(kMagic) + kNonceBytes;           // server's first
constexpr size_t kProofBytes = sizeof(kMagic) + kNonceBytes + kMacBytes;  // client's
constexpr size_t kReplyHeaderBytes = 4 + kMacBytes;                       // then the address
constexpr std::chrono::milliseconds kRetryAfter{50};

std::string Nonce() {
  std::string n(kNonceBytes, '\0');
  size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return n;
}

std::string Mac(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool SameMac(const std::string& a, const char* b) {
  return a.size() == kMacBytes && CRYPTO_memcmp(a.data(), b, kMacBytes) == 0;
}

std::string LittleEndian32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

uint32_t ReadLittleEndian32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// The server's reply for a client nonce `nc` to its greeting nonce `ns`.
std::string Reply(const std::string& key, const std::string& nc, const std::string& ns,
                  const std::string& blob) {
  const std::string len = LittleEndian32(static_cast<uint32_t>(blob.size()));
  return absl::StrCat(len, Mac(key, absl::StrCat("server", nc, ns, len, blob)), blob);
}

// Sends all of `data` on a non-blocking socket within `budget`; false when
// the peer does not take it.
bool SendAll(int fd, const std::string& data, std::chrono::milliseconds budget) {
  const Clock::time_point end = Clock::now() + budget;
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, static_cast<int>(left.count()));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HelloServer>> HelloServer::Start(const std::string& ip,
                                                                std::string blob,
                                                                std::string secret) {
  const bool v6 = ip.find(':') != std::string::npos;
  absl::StatusOr<DataAddress> at =
      ParseDataAddress(v6 ? absl::StrCat("[", ip, "]:1") : absl::StrCat(ip, ":1"));
  if (!at.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane IP '", ip, "': not an IP address"));
  }
  // Port 0: the kernel picks a free one, read back below.
  if (v6) {
    reinterpret_cast<sockaddr_in6*>(&at->addr)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(&at->addr)->sin_port = 0;
  }
  std::unique_ptr<HelloServer> s(new HelloServer());
  s->listen_fd_ = socket(at->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0 ||
      bind(s->listen_fd_, reinterpret_cast<const sockaddr*>(&at->addr), at->len) != 0 ||
      listen(s->listen_fd_, 128) != 0) {
    return absl::UnavailableError(
        absl::StrCat("data-plane listener on ", ip, ": ", std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  s->address_ = FormatDataAddress(reinterpret_cast<const sockaddr*>(&bound));
  s->blob_ = std::move(blob);
  s->secret_ = std::move(secret);
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

HelloServer::~HelloServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void HelloServer::SetSecret(std::string secret) {
  std::lock_guard<std::mutex> lock(mu_);
  secret_ = std::move(secret);
}

void HelloServer::Serve() {
  struct Conn {
    int fd;
    Clock::time_point deadline;
    std::string ns, in;
  };
  std::vector<Conn> conns;
  auto drop = [&](size_t i, bool refused) {
    close(conns[i].fd);
    if (refused) ++refused_;
    conns[i] = std::move(conns.back());
    conns.pop_back();
  };
  while (!stop_) {
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    // Short: the destructor's stop flag is seen within it.
    if (poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) break;
    const Clock::time_point now = Clock::now();
    // Reads before accepting, by index into fds (conns shrinks as it goes).
    for (size_t k = fds.size(); k-- > 1;) {
      const size_t i = k - 1;
      if (fds[k].revents == 0) {
        if (now >= conns[i].deadline) drop(i, true);
        continue;
      }
      Conn& c = conns[i];
      char buf[kProofBytes];
      const ssize_t n = recv(c.fd, buf, kProofBytes - c.in.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) {
        drop(i, true);
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() < kProofBytes) continue;
      std::string secret;
      {
        std::lock_guard<std::mutex> lock(mu_);
        secret = secret_;
      }
      const std::string nc = c.in.substr(sizeof(kMagic), kNonceBytes);
      const bool ok = std::memcmp(c.in.data(), kMagic, sizeof(kMagic)) == 0 &&
                      SameMac(Mac(secret, absl::StrCat("client", c.ns, nc)),
                              c.in.data() + sizeof(kMagic) + kNonceBytes);
      if (ok && SendAll(c.fd, Reply(secret, nc, c.ns, blob_), kHelloTimeout)) {
        ++answered_;
        drop(i, false);
      } else {
        drop(i, true);
      }
    }
    if (fds[0].revents != 0) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (conns.size() >= static_cast<size_t>(kMaxClients)) {
          close(fd);
          ++refused_;
          continue;
        }
        Conn c{fd, now + kHelloTimeout, Nonce(), {}};
        if (!SendAll(fd, absl::StrCat(std::string(kMagic, sizeof(kMagic)), c.ns),
                     std::chrono::milliseconds(0))) {
          close(fd);
          ++refused_;
          continue;
        }
        conns.push_back(std::move(c));
      }
    }
  }
  for (Conn& c : conns) close(c.fd);
}

HelloClient::HelloClient(DataAddress peer, std::string secret)
    : peer_(peer), secret_(std::move(secret)) {}

HelloClient::~HelloClient() {
  if (fd_ >= 0) close(fd_);
}

absl::Status HelloClient::Restart() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  in_.clear();
  state_ = kConnecting;
  retry_at_ = Clock::now() + kRetryAfter;
  return absl::OkStatus();
}

bool HelloClient::ReadUpTo(size_t want, bool* eof) {
  *eof = false;
  char buf[4096];
  while (in_.size() < want) {
    const ssize_t n = recv(fd_, buf, std::min(sizeof(buf), want - in_.size()), MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      *eof = true;
      return false;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
  return true;
}

absl::Status HelloClient::Step() {
  const std::string at = FormatDataAddress(reinterpret_cast<const sockaddr*>(&peer_.addr));
  if (state_ == kDone) return absl::OkStatus();
  if (fd_ < 0) {
    if (Clock::now() < retry_at_) return absl::OkStatus();
    fd_ = socket(peer_.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&peer_.addr), peer_.len) != 0 &&
        errno != EINPROGRESS) {
      return absl::UnavailableError(
          absl::StrCat("data-plane hello to ", at, ": ", std::strerror(errno)));
    }
    state_ = kConnecting;
  }
  if (state_ == kConnecting) {
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return absl::OkStatus();
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return absl::UnavailableError(
          absl::StrCat("data-plane hello to ", at, ": ", std::strerror(err)));
    }
    state_ = kGreeting;
  }
  bool eof = false;
  if (state_ == kGreeting) {
    if (!ReadUpTo(kGreetingBytes, &eof)) {
      // Closed before its greeting: a server at its cap of hellos.
      if (eof || errno == ECONNRESET) return Restart();
      return absl::UnavailableError(
          absl::StrCat("data-plane hello to ", at, ": ", std::strerror(errno)));
    }
    if (in_.size() < kGreetingBytes) return absl::OkStatus();
    if (std::memcmp(in_.data(), kMagic, sizeof(kMagic)) != 0) {
      return absl::UnavailableError(
          absl::StrCat(at, " did not answer with a gradex data-plane hello"));
    }
    ns_ = in_.substr(sizeof(kMagic), kNonceBytes);
    nc_ = Nonce();
    const std::string proof = absl::StrCat(std::string(kMagic, sizeof(kMagic)), nc_,
                                           Mac(secret_, absl::StrCat("client", ns_, nc_)));
    if (!SendAll(fd_, proof, std::chrono::milliseconds(0))) {
      return absl::UnavailableError(
          absl::StrCat("data-plane hello to ", at, ": ", std::strerror(errno)));
    }
    in_.clear();
    state_ = kReply;
  }
  // kReply: the header, then the address it announces.
  auto closed = [&] {
    return absl::PermissionDeniedError(
        absl::StrCat(at, " closed the data-plane hello",
                     eof ? " after our proof: it holds another job's token (or none)" : ": ",
                     eof ? "" : std::strerror(errno)));
  };
  if (!ReadUpTo(kReplyHeaderBytes, &eof)) return closed();
  if (in_.size() < kReplyHeaderBytes) return absl::OkStatus();
  const uint32_t len = ReadLittleEndian32(in_.data());
  if (len == 0 || len > kMaxWorkerAddressBytes) {
    return absl::PermissionDeniedError(absl::StrCat(at, "'s data-plane hello announces a ", len,
                                                    "-byte UCX address (1..",
                                                    kMaxWorkerAddressBytes, " expected)"));
  }
  if (!ReadUpTo(kReplyHeaderBytes + len, &eof)) return closed();
  if (in_.size() < kReplyHeaderBytes + len) return absl::OkStatus();
  std::string blob = in_.substr(kReplyHeaderBytes, len);
  if (!SameMac(Mac(secret_, absl::StrCat("server", nc_, ns_, in_.substr(0, 4), blob)),
               in_.data() + 4)) {
    return absl::PermissionDeniedError(
        absl::StrCat(at, "'s data-plane hello is not signed with this job's token"));
  }
  blob_ = std::move(blob);
  state_ = kDone;
  close(fd_);
  fd_ = -1;
  return absl::OkStatus();
}

}  // namespace gradex::transport::ucx
