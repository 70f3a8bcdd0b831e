// The parts of tcp_fabric, each on its own over loopback: the acceptor and the connector (the
// handshake both ways, strangers, refused ports), the non-blocking connect they share (dial), the
// endpoint directory over an in-memory rendezvous, and the one lost-node message.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../catch.hpp"
#include "core/lost_node.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "jobkit/log.hpp"
#include "memory_rendezvous.hpp"
#include "network/acceptor.hpp"
#include "network/connector.hpp"
#include "network/dial.hpp"
#include "rendezvous/endpoint_directory.hpp"

using namespace jobkit::detail;
using namespace std::chrono_literals;

namespace {

jobkit::identity rank_of(int rank, int size, int node) {
  jobkit::identity id;
  id.rank = rank;
  id.world_size = size;
  id.node_rank = node;
  id.num_nodes = 2;
  id.hostname = fmt::format("n{}", node);
  return id;
}

secret_bytes fresh() {
  secret_bytes s{};
  fill_random(s);
  return s;
}

/// Rank 1 listening on loopback with secret `secret`, as rank 0 sees it.
endpoint listener_endpoint(const acceptor& a, const secret_bytes& secret) {
  endpoint e;
  e.port = a.port();
  e.host = "n1";
  e.addresses = {"127.0.0.1"};
  e.secret = secret;
  return e;
}

/// Runs the acceptor until rank `rank`'s connection for `key` came, or `until`.
int accept_one(acceptor& a, const std::string& key, int rank, steady_clock::time_point until) {
  while (steady_clock::now() < until) {
    if (const int fd = a.take(key, rank); fd >= 0) return fd;
    a.wait(std::min(until, steady_clock::now() + 50ms));
  }
  return -1;
}

}  // namespace

TEST_CASE("acceptor and connector: a rank that proves its membership gets in, both ways") {
  const jobkit::logger log(rank_of(1, 2, 1));
  const auto secret = fresh();
  acceptor a({"127.0.0.1"}, secret, 2, 5s, 8s, log);
  connector c(0, 5s, 8s, log);
  auto dialled = std::async(std::launch::async, [&] {
    return c.connect(listener_endpoint(a, secret), 1, "2-k#0", steady_clock::now() + 10s);
  });
  const int accepted = accept_one(a, "2-k#0", 0, steady_clock::now() + 10s);
  const int connected = dialled.get();
  REQUIRE(accepted >= 0);
  REQUIRE(connected >= 0);
  CHECK(a.dropped() == 0);
  CHECK(a.take("2-k#0", 0) == -1);  // taken once
  // The link carries bytes both ways.
  char byte = 'x';
  CHECK(::send(connected, &byte, 1, MSG_NOSIGNAL) == 1);
  char got = 0;
  receive_all(accepted, &got, 1, steady_clock::now() + 5s);
  CHECK(got == 'x');
  ::close(accepted);
  ::close(connected);
}

TEST_CASE("acceptor: a connection without the secret is dropped, the connector told it was refused") {
  const jobkit::logger log(rank_of(1, 2, 1));
  const auto secret = fresh();
  acceptor a({"127.0.0.1"}, secret, 2, 5s, 8s, log);
  connector c(0, 2s, 8s, log);
  auto dialled = std::async(std::launch::async, [&] {
    try {
      c.connect(listener_endpoint(a, fresh()), 1, "2-k#0", steady_clock::now() + 10s);
      return std::string("connected");
    } catch (const jobkit::error& e) {
      return std::string(e.what());
    }
  });
  const int accepted = accept_one(a, "2-k#0", 0, steady_clock::now() + 4s);
  const auto message = dialled.get();
  CHECK(accepted == -1);
  CHECK(a.dropped() >= 1);
  CHECK_THAT(message, Catch::Contains("cannot connect to rank 1 (n1)") &&
                          Catch::Contains("our proof of membership was refused"));
}

TEST_CASE("acceptor: a stranger sending garbage is dropped while a rank gets in") {
  const jobkit::logger log(rank_of(1, 2, 1));
  const auto secret = fresh();
  acceptor a({"127.0.0.1"}, secret, 2, 5s, 8s, log);
  auto stranger = begin_dial("127.0.0.1", a.port(), 8s);
  REQUIRE(stranger.fd >= 0);
  wait_ready(stranger.fd, POLLOUT, steady_clock::now() + 5s);
  REQUIRE(dial_outcome(stranger.fd) == 0);
  const std::string garbage(64, 'G');
  REQUIRE(::send(stranger.fd, garbage.data(), garbage.size(), MSG_NOSIGNAL) == 64);
  connector c(0, 5s, 8s, log);
  auto dialled = std::async(std::launch::async, [&] {
    return c.connect(listener_endpoint(a, secret), 1, "2-k#0", steady_clock::now() + 10s);
  });
  const int accepted = accept_one(a, "2-k#0", 0, steady_clock::now() + 10s);
  const int connected = dialled.get();
  CHECK(accepted >= 0);
  CHECK(connected >= 0);
  CHECK(a.dropped() == 1);
  ::close(stranger.fd);
  ::close(accepted);
  ::close(connected);
}

TEST_CASE("connector: a refused port is tried again with back-off, then named with the reason") {
  const jobkit::logger log(rank_of(0, 2, 0));
  int port = 0;
  {
    acceptor closed({"127.0.0.1"}, fresh(), 2, 5s, 8s, log);
    port = closed.port();
  }  // nothing listens there now
  endpoint e;
  e.port = port;
  e.host = "n1";
  e.addresses = {"127.0.0.1"};
  connector c(0, 2s, 8s, log);
  const auto start = steady_clock::now();
  try {
    c.connect(e, 1, "2-k#0", steady_clock::now() + 30s);
    FAIL("connected to a closed port");
  } catch (const jobkit::timeout_error&) {
    FAIL("a refused port ran into the deadline");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::peer_failure);
    CHECK_THAT(e.what(), Catch::Contains("cannot connect to rank 1 (n1)") &&
                             Catch::Contains(fmt::format("127.0.0.1 port {}: Connection refused", port)) &&
                             Catch::Contains("nothing listens there any more: it ended before this rank came") &&
                             Catch::Contains("the others' deadline passed before it arrived"));
  }
  // 7 pauses of 50 ms doubling to 1 s, each 0.5 to 1.5 times that: 1.1 s at least.
  CHECK(steady_clock::now() - start >= 1s);
  CHECK(steady_clock::now() - start < 20s);
}

TEST_CASE("dial: a listening port connects, a closed one is refused") {
  const jobkit::logger log(rank_of(0, 1, 0));
  auto a = std::make_unique<acceptor>(std::vector<std::string>{"127.0.0.1"}, fresh(), 1, 5s, 8s, log);
  const int port = a->port();
  auto open = begin_dial("127.0.0.1", port, 8s);
  REQUIRE(open.fd >= 0);
  if (!open.connected) wait_ready(open.fd, POLLOUT, steady_clock::now() + 5s);
  CHECK(dial_outcome(open.fd) == 0);
  ::close(open.fd);
  a.reset();
  auto refused = begin_dial("127.0.0.1", port, 8s);
  if (refused.fd >= 0) {
    wait_ready(refused.fd, POLLOUT, steady_clock::now() + 5s);
    CHECK(dial_outcome(refused.fd) == ECONNREFUSED);
    ::close(refused.fd);
  } else {
    CHECK(refused.error == ECONNREFUSED);
  }
  const auto bad = begin_dial("not-an-address", port, 8s);
  CHECK(bad.fd == -1);
  CHECK_FALSE(bad.why.empty());
}

TEST_CASE("endpoint_directory: endpoints read on demand, and a missing one, once settled, names a lost node") {
  auto store = std::make_shared<test_support::memory_rendezvous_store>(3, std::vector<int>{0, 1, 1});
  const jobkit::logger log(rank_of(0, 3, 0));
  test_support::memory_rendezvous rv0(store, 0), rv1(store, 1);
  endpoint mine0, mine1;
  mine0.port = 1000;
  mine0.host = "n0";
  mine0.addresses = {"127.0.0.1"};
  mine1 = mine0;
  mine1.port = 1001;
  mine1.node = 1;
  mine1.host = "n1";
  auto id1 = rank_of(1, 3, 1);
  endpoint_directory d1(rv1, id1, mine1, "jobkit.endpoint", 5s, 2s, log);
  endpoint_directory d0(rv0, rank_of(0, 3, 0), mine0, "jobkit.endpoint", 5s, 2s, log);
  CHECK(d0.on_demand());
  CHECK(d0.port() == 1000);
  CHECK(d0.host_of(2) == "n1");
  CHECK(d0.known(1) == nullptr);
  CHECK(d0.endpoint_of(1, steady_clock::now() + 5s).port == 1001);
  CHECK(d0.known(1) != nullptr);
  // Rank 2 never publishes: before the world's first exchange that is a rank not yet arrived (the
  // deadline's error), after it a lost node, named within the silence limit.
  CHECK_THROWS_AS(d0.endpoint_of(2, steady_clock::now() + 300ms), jobkit::timeout_error);
  d0.settle();
  const auto start = steady_clock::now();
  try {
    d0.endpoint_of(2, steady_clock::now() + 30s);
    FAIL("an endpoint never published was read");
  } catch (const jobkit::timeout_error&) {
    FAIL("a settled directory waited for the deadline");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::peer_failure);
    CHECK_THAT(e.what(), Catch::Contains("rank 2 (n1): its node n1 gave no answer for its endpoint for 2 s "
                                         "(JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut off from n0"));
  }
  CHECK(steady_clock::now() - start < 10s);
}

TEST_CASE("endpoint_directory: a placement that contradicts this rank's identity is refused with both") {
  auto store = std::make_shared<test_support::memory_rendezvous_store>(2, std::vector<int>{0, 1});
  const jobkit::logger log(rank_of(1, 2, 1));
  test_support::memory_rendezvous rv(store, 1);
  auto id = rank_of(1, 2, 0);  // the launcher says node 1
  CHECK_THROWS_WITH(endpoint_directory(rv, id, endpoint{}, "jobkit.endpoint", 5s, 2s, log),
                    Catch::Contains("this one on node 1 at local rank 0, but its identity says node 0"));
}

TEST_CASE("lost_node: one message, one time format") {
  CHECK(describe(lost_node{.node = "c3",
                           .what = "answered nothing",
                           .limit = 8000ms,
                           .seen_from = "c1",
                           .ranks = {4, 5},
                           .detail = {}}) ==
        "its node c3 answered nothing for 8 s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut off from c1 "
        "(ranks on c3 in this group: 4, 5)");
  CHECK(describe(lost_node{.node = "c3",
                           .what = "gave no answer for its endpoint",
                           .limit = 2500ms,
                           .seen_from = {},
                           .ranks = {},
                           .detail = "why"}) ==
        "its node c3 gave no answer for its endpoint for 2.5 s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut "
        "off (why)");
  CHECK(describe(lost_node{
            .node = "c3", .what = "is unreachable", .limit = 0ms, .seen_from = {}, .ranks = {}, .detail = {}}) ==
        "its node c3 is unreachable: the node is lost or cut off");
  CHECK(ranks_on_node({7, 8, 9, 10}, {"a", "b", "a", "c"}, "a") == std::vector<int>{7, 9});
}
