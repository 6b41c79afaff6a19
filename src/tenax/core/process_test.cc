// The small process-level helpers: WakePipe wakes a thread blocked in poll() and StopAndJoin ends
// it; FreeTcpPort hands out a port that a listener can bind, on loopback or a given address;
// cli::Commands runs the subcommand that was parsed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <set>
#include <thread>

#include "tenax/core/cli.h"
#include "tenax/core/net.h"
#include "tenax/core/wake_pipe.h"

namespace tenax {
namespace {

TEST(WakePipe, WakesAThreadBlockedInPollAndJoinsIt) {
  WakePipe pipe;
  ASSERT_TRUE(pipe.ok());
  std::atomic<bool> woke{false};
  std::thread t([&] {
    pollfd fd = {pipe.read_fd(), POLLIN, 0};
    while (::poll(&fd, 1, -1) <= 0) {
    }
    woke = true;  // only a Signal makes the descriptor readable: poll has no timeout
  });
  StopAndJoin(pipe, t);
  EXPECT_TRUE(woke);
  EXPECT_FALSE(t.joinable());
  StopAndJoin(pipe, t);  // a thread that is not running: nothing to do
}

TEST(FreeTcpPort, ReturnsAPortAListenerCanBind) {
  for (const char* address : {"127.0.0.1", "0.0.0.0", "not-an-address"}) {
    const int port = FreeTcpPort(address);
    ASSERT_GT(port, 0) << address;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << address;
    ::close(fd);
    // Not one the kernel could give another process's connection meanwhile.
    const auto [lo, hi] = EphemeralPortRange();
    if (lo > kFirstChosenPort || hi < 65535) {
      EXPECT_TRUE(port < lo || port > hi) << port << " in " << lo << "-" << hi;
      EXPECT_GE(port, kFirstChosenPort);
    }
  }
  // Drawn at random: two launchers on one machine do not pick the same port.
  std::set<int> ports;
  for (int i = 0; i < 20; ++i) ports.insert(FreeTcpPort());
  EXPECT_GT(ports.size(), 15u);
}

TEST(CliCommands, RunsTheParsedSubcommandOnly) {
  CLI::App app;
  cli::Commands commands;
  int ran_a = 0, ran_b = 0;
  commands.Add(app.add_subcommand("a"), [&]() -> Result<int> { return ++ran_a; });
  commands.Add(app.add_subcommand("b"), cli::FromStatus([&] {
                 ++ran_b;
                 return InvalidArgument("b failed");
               }));
  EXPECT_EQ(commands.Parsed(), nullptr);     // nothing parsed yet
  app.parse(std::vector<std::string>{"b"});  // CLI11 takes them in reverse order
  const cli::Runner* run = commands.Parsed();
  ASSERT_NE(run, nullptr);
  const Result<int> rc = (*run)();
  EXPECT_EQ(ran_a, 0);
  EXPECT_EQ(ran_b, 1);
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().message(), "b failed");
}

}  // namespace
}  // namespace tenax
