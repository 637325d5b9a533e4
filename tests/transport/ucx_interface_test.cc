// The data plane listens on the one interface it was given: UCX's TCP
// transport otherwise opens a listening socket on every interface it finds.
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::testing {
namespace {

// Socket inodes this process holds.
std::set<std::string> OwnSocketInodes() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  return inodes;
}

// Local addresses (hex, as /proc/net/tcp* writes them) of this process's
// listening TCP sockets.
std::vector<std::string> OwnListeningAddresses() {
  const std::set<std::string> own = OwnSocketInodes();
  std::vector<std::string> out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && own.contains(inode)) out.push_back(local.substr(0, local.find(':')));
    }
  }
  return out;
}

bool HasNonLoopbackInterface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET && (a->ifa_flags & IFF_UP) &&
        !(a->ifa_flags & IFF_LOOPBACK)) {
      found = true;
    }
  }
  freeifaddrs(list);
  return found;
}

TEST(UcxInterfaceTest, AWorkerListensOnlyOnItsDataInterface) {
  if (!HasNonLoopbackInterface()) GTEST_SKIP() << "no interface but loopback to stray onto";
  if (std::getenv("UCX_NET_DEVICES") != nullptr) GTEST_SKIP() << "UCX_NET_DEVICES is set";
  if (std::filesystem::exists("/sys/class/infiniband")) GTEST_SKIP() << "RDMA device present";
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.listen_ip = "127.0.0.1";
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> w =
      transport::ucx::CreateUcxWorker(opt);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string> listening = OwnListeningAddresses();
  ASSERT_FALSE(listening.empty()) << "the worker's listener was not found";
  for (const std::string& addr : listening) {
    EXPECT_EQ(addr, "0100007F") << "a listening socket on another address (hex " << addr << ")";
  }
}

TEST(UcxInterfaceTest, WithoutPinningUcxStraysOntoOtherInterfaces) {
  // The control: shows the test above can fail on this machine.
  if (!HasNonLoopbackInterface()) GTEST_SKIP() << "no interface but loopback to stray onto";
  if (std::getenv("UCX_NET_DEVICES") != nullptr) GTEST_SKIP() << "UCX_NET_DEVICES is set";
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.listen_ip = "127.0.0.1";
  opt.pin_net_device = false;
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> w =
      transport::ucx::CreateUcxWorker(opt);
  ASSERT_TRUE(w.ok()) << w.status();
  int other = 0;
  for (const std::string& addr : OwnListeningAddresses()) other += addr != "0100007F";
  EXPECT_GT(other, 0);
}

}  // namespace
}  // namespace gradex::testing
