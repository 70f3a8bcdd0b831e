// What the routes of the tree stand on, and what is not a route: the tree's layout, the handshake's
// pieces, the frame limits, connections and their failures (strangers on a rank's port, a refused or
// wrong port, a rank that leaves), endpoints read on demand and lost nodes, the links' probes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "../catch.hpp"
#include "core/posix_io.hpp"
#include "core/sha256.hpp"
#include "core/timeout.hpp"
#include "memory_rendezvous.hpp"
#include "network/addresses.hpp"
#include "network/fabric.hpp"
#include "network/handshake.hpp"
#include "rendezvous/endpoint_turn.hpp"
#include "rendezvous/rendezvous.hpp"
#include "support.hpp"
#include "transport/frame.hpp"
#include "transport/tree.hpp"
#include "transport/tree_layout.hpp"
#include "transport_support.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::memory_rendezvous;
using test_support::memory_rendezvous_store;
using test_support::on_tcp_ranks;
using test_support::rank_identity;

namespace {

std::string hex(std::span<const std::byte> bytes) {
  std::string out;
  for (const auto b : bytes) out += fmt::format("{:02x}", static_cast<unsigned>(b));
  return out;
}

std::span<const std::byte> text_bytes(std::string_view text) { return as_bytes(text); }

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_text(int fd, std::string_view text) { REQUIRE(::send(fd, text.data(), text.size(), MSG_NOSIGNAL) >= 0); }

/// A TCP listener on loopback at a port the kernel chose, and its address.
struct loopback_listener {
  int fd = -1;
  sockaddr_in addr{};
};

loopback_listener listen_on_loopback(int backlog) {
  loopback_listener l;
  l.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(l.fd >= 0);
  l.addr.sin_family = AF_INET;
  l.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof l.addr;
  REQUIRE(::bind(l.fd, reinterpret_cast<sockaddr*>(&l.addr), sizeof l.addr) == 0);
  REQUIRE(::listen(l.fd, backlog) == 0);
  REQUIRE(::getsockname(l.fd, reinterpret_cast<sockaddr*>(&l.addr), &length) == 0);
  return l;
}

}  // namespace

TEST_CASE("the tree: node leaders in a binomial tree, the others under their node's leader", "[transport]") {
  // Nodes 0..3; leaders are group ranks 0, 3, 5 and 7.
  const auto parents = tree_parents({0, 0, 0, 1, 1, 2, 2, 3});
  CHECK(parents == std::vector<int>{-1, 0, 0, 0, 3, 0, 5, 5});
  const auto root = position_in_tree(parents, 0);
  CHECK(root.parent == -1);
  CHECK(root.children == std::vector<int>{1, 2, 3, 5});
  CHECK(root.subtrees == std::vector<std::vector<int>>{{1}, {2}, {3, 4}, {5, 6, 7}});
  CHECK(root.child_of == std::vector<int>{-1, 0, 1, 2, 2, 3, 3, 3});
  const auto leaf = position_in_tree(parents, 6);
  CHECK(leaf.parent == 5);
  CHECK(leaf.children.empty());
  // A cyclic layout: ranks of a node are not adjacent.
  CHECK(tree_parents({0, 1, 2, 0, 1, 2}) == std::vector<int>{-1, 0, 0, 0, 1, 2});
  CHECK(tree_parents({4}) == std::vector<int>{-1});
}

TEST_CASE("SHA-256 and HMAC-SHA-256 match their published test vectors", "[transport]") {
  auto digest = [](std::string_view text) {
    sha256 h;
    h.update(text_bytes(text));
    return hex(h.finish());
  };
  CHECK(digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231, test case 2.
  CHECK(hex(hmac_sha256(text_bytes("Jefe"), text_bytes("what do ya want for nothing?"))) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // RFC 4231, test case 6: a key longer than a block.
  const std::string long_key(131, '\xaa');
  CHECK(hex(hmac_sha256(text_bytes(long_key), text_bytes("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("an endpoint record round-trips and its errors never show the secret", "[transport]") {
  endpoint e;
  e.node = 2;
  e.local_rank = 1;
  e.port = 40123;
  e.host = "c3";
  e.addresses = {"198.18.0.3", "fd00::3"};
  fill_random(e.secret);
  const auto record = encode_endpoint(5, e);
  const auto back = decode_endpoint(text_bytes(record), 5);
  CHECK(back.node == 2);
  CHECK(back.local_rank == 1);
  CHECK(back.port == 40123);
  CHECK(back.host == "c3");
  CHECK(back.addresses == e.addresses);
  CHECK(back.secret == e.secret);

  const auto secret_text = hex(e.secret);
  try {
    decode_endpoint(text_bytes(record), 4);
    FAIL("a record of rank 5 was taken for rank 4");
  } catch (const jobkit::error& error) {
    CHECK(contains(error.what(), "rank 4 published a malformed endpoint"));
    CHECK_FALSE(contains(error.what(), secret_text));
  }
  auto bad_port = record;
  bad_port.replace(bad_port.find("40123"), 5, "99999");
  CHECK_THROWS_WITH(decode_endpoint(text_bytes(bad_port), 5), Catch::Contains("the port is not a number"));
  CHECK_THROWS_WITH(decode_endpoint(text_bytes("garbage"), 5), Catch::Contains("no jobkit endpoint tag"));
  CHECK_THROWS_WITH(decode_endpoint(text_bytes(std::string(5000, 'x')), 5), Catch::Contains("5000 bytes"));

  auto other_build = record;
  other_build.replace(other_build.find(fmt::format(" {} ", protocol_version)), 3, " 2 ");
  try {
    decode_endpoint(text_bytes(other_build), 5);
    FAIL("a record of another protocol version was accepted");
  } catch (const jobkit::error& error) {
    CHECK(error.code() == jobkit::errc::invalid_environment);
    CHECK(contains(error.what(), "(data path protocol 2), this rank runs jobkit"));
    CHECK(contains(error.what(), "every rank of a step must run the same jobkit build"));
  }
}

TEST_CASE("handshake messages decode only what they encode", "[transport]") {
  challenge_message c;
  fill_random(c.nonce);
  const auto challenge = encode_challenge(c);
  const auto decoded = decode_challenge(challenge);
  REQUIRE(decoded);
  CHECK(decoded->nonce == c.nonce);
  CHECK(decoded->version == protocol_version);
  std::array<std::byte, challenge_size> http{};
  std::memcpy(http.data(), "HTTP/1.1 400 Bad Request", challenge_size);
  CHECK_FALSE(decode_challenge(http));

  hello_message h;
  h.world_rank = 7;
  h.group_key = "3-00112233#0";
  const auto hello = encode_hello(h);
  const auto start = decode_hello_start(std::span<const std::byte, hello_fixed_size>(hello.data(), hello_fixed_size));
  REQUIRE(start);
  CHECK(start->hello.world_rank == 7);
  CHECK(start->key_size == h.group_key.size());
  h.group_key = std::string(max_group_key_size + 1, 'k');
  const auto too_long = encode_hello(h);
  CHECK_FALSE(decode_hello_start(std::span<const std::byte, hello_fixed_size>(too_long.data(), hello_fixed_size)));

  secret_bytes secret{};
  fill_random(secret);
  nonce_bytes a{}, b{};
  fill_random(a);
  fill_random(b);
  CHECK(hello_mac(secret, a, b, 1, "k") != hello_mac(secret, b, a, 1, "k"));  // the nonces' roles differ
  CHECK(hello_mac(secret, a, b, 1, "k") != welcome_mac(secret, a, b, 1, "k"));
  CHECK(hello_mac(secret, a, b, 1, "k") != hello_mac(secret, a, b, 2, "k"));
}

TEST_CASE("JOBKIT_SOCKET_IFNAME selects interfaces as NCCL_SOCKET_IFNAME does", "[transport]") {
  const auto prefixes = parse_interface_filter("JOBKIT_SOCKET_IFNAME", "eth,ib");
  CHECK(interface_matches(prefixes, "eth0"));
  CHECK(interface_matches(prefixes, "ib1"));
  CHECK_FALSE(interface_matches(prefixes, "lo"));
  const auto excluded = parse_interface_filter("JOBKIT_SOCKET_IFNAME", "^docker,lo");
  CHECK(excluded.exclude);
  CHECK_FALSE(interface_matches(excluded, "docker0"));
  CHECK(interface_matches(excluded, "eth0"));
  const auto exact = parse_interface_filter("JOBKIT_SOCKET_IFNAME", "=eth1");
  CHECK(interface_matches(exact, "eth1"));
  CHECK_FALSE(interface_matches(exact, "eth10"));
  const auto not_exact = parse_interface_filter("JOBKIT_SOCKET_IFNAME", "^=eth1");
  CHECK(interface_matches(not_exact, "eth10"));
  CHECK_FALSE(interface_matches(not_exact, "eth1"));
  CHECK_THROWS_WITH(parse_interface_filter("JOBKIT_SOCKET_IFNAME", "^"),
                    Catch::Contains("JOBKIT_SOCKET_IFNAME='^' names no interface"));

  const std::vector<interface_address> host{{"lo", "127.0.0.1", true, false},
                                            {"docker0", "172.17.0.1", false, false},
                                            {"ib0", "fd00::5", false, true},
                                            {"eth0", "10.0.0.5", false, false},
                                            {"eth1", "10.1.0.5", false, false}};
  using jobkit::detail::map_environment;
  auto numeric = [&](const map_environment& env, bool single_host) {
    std::vector<std::string> out;
    for (const auto& a : choose_endpoint_addresses(env, single_host, host))
      out.push_back(a.interface + " " + a.numeric);
    return out;
  };
  CHECK(numeric(map_environment{}, true) == std::vector<std::string>{"lo 127.0.0.1"});
  CHECK(numeric(map_environment{}, false) == std::vector<std::string>{"eth0 10.0.0.5", "eth1 10.1.0.5", "ib0 fd00::5"});
  CHECK(numeric(map_environment{{"JOBKIT_SOCKET_IFNAME", "ib"}}, false) == std::vector<std::string>{"ib0 fd00::5"});
  CHECK(numeric(map_environment{{"JOBKIT_SOCKET_IFNAME", "=eth1"}}, true) == std::vector<std::string>{"eth1 10.1.0.5"});
  CHECK_THROWS_WITH(choose_endpoint_addresses(map_environment{{"JOBKIT_SOCKET_IFNAME", "xyz"}}, false, host),
                    Catch::Contains("JOBKIT_SOCKET_IFNAME='xyz' selects no interface address of this host (it has: "
                                    "lo 127.0.0.1, docker0 172.17.0.1"));
  const std::vector<interface_address> loopback_only{{"lo", "127.0.0.1", true, false}};
  CHECK_THROWS_WITH(choose_endpoint_addresses(map_environment{}, false, loopback_only),
                    Catch::Contains("no usable non-loopback address") && Catch::Contains("JOBKIT_SOCKET_IFNAME"));
}

TEST_CASE("each process of a rank takes the next endpoint turn of its node, and a bad count is named", "[transport]") {
  using jobkit::detail::endpoint_turn;
  using jobkit::detail::map_environment;
  using jobkit::detail::task_of;
  using jobkit::detail::task_of_process;
  // The task: SLURM_TASK_PID, else the parent; its stamp tells it from an earlier task.
  const auto task = task_of(map_environment{{"SLURM_TASK_PID", "4242"}, {"SLURM_SRUN_COMM_PORT", "40001"}}, 7);
  CHECK(task.pid == 4242);
  CHECK(task_of(map_environment{{"SLURM_TASK_PID", "42x"}}, 7).pid == 7);
  CHECK(task_of(map_environment{}, 7).pid == 7);
  CHECK(task.stamp != task_of(map_environment{{"SLURM_TASK_PID", "4243"}, {"SLURM_SRUN_COMM_PORT", "40001"}}, 7).stamp);
  CHECK(task.stamp != task_of(map_environment{{"SLURM_TASK_PID", "4242"}, {"SLURM_SRUN_COMM_PORT", "40002"}}, 7).stamp);
  CHECK(task.stamp != task_of(map_environment{{"SLURM_TASK_PID", "42424"}, {"SLURM_SRUN_COMM_PORT", "0001"}}, 7).stamp);

  using jobkit::detail::end_task_turns;
  using jobkit::detail::take_endpoint_turn;
  jobkit::identity self;
  CHECK(take_endpoint_turn(self, task).number == 0);  // no job id: no launcher, no earlier process of this rank
  CHECK(take_endpoint_turn(self, task).key() == "jobkit.endpoint");
  self.job_id = fmt::format("unit{}", ::getpid());
  self.step_id = "0";
  self.node_rank = 2;
  self.local_rank = 1;
  const auto name = jobkit::detail::endpoint_turns_name(self);
  CHECK(name == fmt::format("/jobkit-turns-unit{}.0-n2", ::getpid()));
  ::shm_unlink(name.c_str());
  const struct unlink_at_end {
    const std::string& name;
    ~unlink_at_end() { ::shm_unlink(name.c_str()); }
  } cleanup{name};
  const auto exists = [&] { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; };
  // A shell's commands, one after another: their task (the shell, here the test's parent) lives on.
  const task_of_process shell{static_cast<int>(::getppid()), 11};
  CHECK(take_endpoint_turn(self, shell).number == 1);
  CHECK(take_endpoint_turn(self, shell).key() == "jobkit.endpoint.t2");
  auto mate = self;
  mate.local_rank = 0;  // a slot of its own, below the one already there
  const task_of_process mate_task{static_cast<int>(::getppid()), 12};
  CHECK(take_endpoint_turn(mate, mate_task).number == 1);
  CHECK(take_endpoint_turn(self, shell).number == 3);
  // An earlier task's slot (the same job and step ids, another stamp): counted from 1 again.
  CHECK(take_endpoint_turn(self, task_of_process{shell.pid, 99}).number == 1);
  CHECK(take_endpoint_turn(self, task_of_process{shell.pid, 99}).number == 2);
  // The tasks end, one after the other: the count stays while one is left, the last removes it.
  end_task_turns(name, 0);
  CHECK(exists());
  end_task_turns(name, 1);
  CHECK(!exists());
  CHECK(take_endpoint_turn(self, shell).number == 1);  // a count made anew

  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  const std::uint64_t past = jobkit::detail::max_endpoint_turns;
  REQUIRE(::pwrite(fd, &past, sizeof past, 24 + 24 + 8) == static_cast<ssize_t>(sizeof past));  // local rank 1's count
  CHECK_THROWS_WITH(take_endpoint_turn(self, shell),
                    Catch::Contains(name) && Catch::Contains("local rank 1 has taken 1000000"));
  const std::uint64_t other_format = 2;
  REQUIRE(::pwrite(fd, &other_format, sizeof other_format, 8) == static_cast<ssize_t>(sizeof other_format));
  CHECK_THROWS_WITH(take_endpoint_turn(mate, mate_task),
                    Catch::Contains(name) && Catch::Contains("written by another jobkit build"));
  if (::geteuid() == 0) {  // as root, the count is given to another user
    REQUIRE(::fchown(fd, 65534, 65534) == 0);
    CHECK_THROWS_WITH(take_endpoint_turn(mate, mate_task),
                      Catch::Contains(name) && Catch::Contains("belongs to user 65534"));
  }
  ::close(fd);
}

TEST_CASE("a count of endpoint turns whose tasks have all ended is removed by the next step's first turn",
          "[transport]") {
  using jobkit::detail::take_endpoint_turn;
  jobkit::identity left;
  left.job_id = fmt::format("unitleft{}", ::getpid());
  left.step_id = "0";
  const auto left_name = jobkit::detail::endpoint_turns_name(left);
  const auto exists = [](const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; };
  ::shm_unlink(left_name.c_str());
  // A step whose task lives on (this test's parent).
  jobkit::identity live = left;
  live.job_id = fmt::format("unitlive{}", ::getpid());
  const auto live_name = jobkit::detail::endpoint_turns_name(live);
  ::shm_unlink(live_name.c_str());
  CHECK(take_endpoint_turn(live, {static_cast<int>(::getppid()), 6}).number == 1);
  // A task that ended without a word (a crash; a shell step's): pid 0x7ffffffe is no process here.
  CHECK(take_endpoint_turn(left, {0x7ffffffe, 5}).number == 1);
  REQUIRE(exists(left_name));
  REQUIRE(exists(live_name));  // the first turn of `left` swept, and kept it
  jobkit::identity next = left;
  next.job_id = fmt::format("unitnext{}", ::getpid());
  const auto next_name = jobkit::detail::endpoint_turns_name(next);
  ::shm_unlink(next_name.c_str());
  CHECK(take_endpoint_turn(next, {static_cast<int>(::getppid()), 7}).number == 1);
  CHECK(!exists(left_name));  // swept: its task ended
  CHECK(exists(live_name));   // kept: its task lives
  for (const auto& n : {left_name, live_name, next_name}) ::shm_unlink(n.c_str());
}

TEST_CASE("frame sizes are checked before anything is allocated", "[transport]") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair) == 0);
  auto expect_violation = [&](frame_header h, const std::string& what) {
    REQUIRE(::send(pair[0], &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    try {
      receive_frame(pair[1], steady_clock::now() + 5s);
      FAIL("a bad header was accepted");
    } catch (const protocol_violation& v) {
      CHECK(contains(v.what, what));
    }
  };
  const frame_header good{frame_magic, static_cast<std::uint32_t>(frame_type::up), 1, 0, 3, 4, 10};
  auto huge_payload = good;
  huge_payload.payload_size = std::uint64_t{1} << 62;
  expect_violation(huge_payload, "payload bytes (limit 4294967296)");
  auto huge_name = good;
  huge_name.name_size = 60000;
  expect_violation(huge_name, "60000-byte name");
  auto bad_magic = good;
  bad_magic.magic = 0x50545448;
  expect_violation(bad_magic, "bad magic number");
  auto bad_type = good;
  bad_type.type = 9;
  expect_violation(bad_type, "unknown type 9");
  for (const auto empty : {frame_type::receipt, frame_type::by_tree}) {
    auto carrying = good;  // these carry no payload
    carrying.type = static_cast<std::uint32_t>(empty);
    expect_violation(carrying, "announcing 10 payload bytes (it carries none)");
  }
  ::close(pair[0]);
  ::close(pair[1]);

  // Entries: counts and ranks are checked against the payload and the group.
  std::vector<std::byte> payload;
  const rank_bytes entry{2, {std::byte{1}, std::byte{2}}};
  append_entries(payload, {&entry});
  CHECK(parse_entries(payload, 3).at(0).bytes == entry.bytes);
  CHECK_THROWS_AS(parse_entries(payload, 2), protocol_violation);  // rank 2 in a group of 2
  auto lying = payload;
  const std::uint32_t many = 1000000;
  std::memcpy(lying.data(), &many, sizeof many);
  CHECK_THROWS_AS(parse_entries(lying, 3), protocol_violation);
  CHECK_THROWS_AS(parse_entries(std::span(payload).first(payload.size() - 1), 3), protocol_violation);
}

TEST_CASE("strangers on a rank's port: silent, garbage, absurd sizes, forged hello; none stalls the group",
          "[transport]") {
  std::promise<int> port_of_rank_0;
  auto port = port_of_rank_0.get_future().share();
  std::atomic<std::uint64_t> dropped_at_end{0};
  std::vector<int> strangers;
  std::thread stranger([&] {
    const int p = port.get();
    strangers.push_back(connect_loopback(p));  // (a) silent
    const int http = connect_loopback(p);      // (b) 18 bytes of an HTTP request, then silent
    send_text(http, "GET / HTTP/1.1\r\n\r\n");
    strangers.push_back(http);
    const int garbage = connect_loopback(p);  // (b) garbage longer than a hello
    send_text(garbage, std::string(200, '\x7f'));
    strangers.push_back(garbage);
    const int absurd = connect_loopback(p);  // (c) a well-formed frame header with absurd sizes
    const frame_header h{frame_magic, 1, 1, 0, 65535, 65535, std::uint64_t{1} << 62};
    REQUIRE(::send(absurd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    strangers.push_back(absurd);
    const int forged = connect_loopback(p);  // (d) a hello claiming to be rank 1, without the secret
    std::array<std::byte, challenge_size> challenge{};
    REQUIRE(::recv(forged, challenge.data(), challenge.size(), MSG_WAITALL) == challenge_size);
    hello_message hello;
    hello.world_rank = 1;
    hello.group_key = "4-0000000000000000#0";
    const auto bytes = encode_hello(hello);
    REQUIRE(::send(forged, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    strangers.push_back(forged);
  });
  const std::vector<int> nodes{0, 1, 1, 2};
  const auto results = on_tcp_ranks(
      nodes,
      [&](tcp_fabric& fabric, jobkit::group& g) {
        const auto sum = g.all_reduce(g.rank() + 1, jobkit::reduce_op::sum);
        // New groups until rank 0 has handled the strangers that send something: the forged
        // hello comes only after rank 0's challenge.
        int sum_again = 0;
        for (int round = 0; round < 200; ++round) {
          auto again = jobkit::detail::group_over(make_tcp_group_state(fabric, g.world_ranks(), 20s));
          sum_again = again.all_reduce(g.rank() + 1, jobkit::reduce_op::sum);
          if (!g.broadcast(g.rank() == 0 && fabric.dropped_connections() < 2)) break;
          std::this_thread::sleep_for(10ms);
        }
        if (g.rank() == 0) dropped_at_end = fabric.dropped_connections();
        return sum * 100 + sum_again;
      },
      30s,
      [&](int rank, tcp_fabric& fabric) {
        if (rank != 0) return;
        port_of_rank_0.set_value(fabric.port());
        std::this_thread::sleep_for(300ms);  // the strangers connect first
      });
  stranger.join();
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 1010);
  }
  // The 200 bytes of garbage and the forged hello were dropped at once; the silent ones (the idle
  // connection, the HTTP request and the 32-byte header) still wait for their 30 s deadline: the
  // real ranks got in, group after group, while they were pending.
  CHECK(dropped_at_end == 2);
  for (const int fd : strangers) ::close(fd);
}

TEST_CASE("a silent stranger is dropped at its handshake deadline", "[transport]") {
  std::promise<int> port_of_rank_0;
  auto port = port_of_rank_0.get_future().share();
  int silent = -1;
  std::thread stranger([&] { silent = connect_loopback(port.get()); });
  std::atomic<std::uint64_t> dropped{0};
  const auto results = on_tcp_ranks(
      {0, 1},
      [&](tcp_fabric& fabric, jobkit::group& g) {
        std::this_thread::sleep_for(400ms);
        auto again = jobkit::detail::group_over(
            make_tcp_group_state(fabric, g.world_ranks(), 20s));  // rank 0 accepts again: deadlines pass
        if (g.rank() == 0) dropped = fabric.dropped_connections();
        return again.all_reduce(1, jobkit::reduce_op::sum);
      },
      200ms,
      [&](int rank, tcp_fabric& fabric) {
        if (rank != 0) return;
        port_of_rank_0.set_value(fabric.port());
        stranger.join();
      });
  for (const auto& o : results) CHECK(o.value == 2);
  CHECK(dropped == 1);
  ::close(silent);
}

TEST_CASE("connecting to an address where no rank of this step listens fails, naming rank and address", "[transport]") {
  // Rank 1 publishes the port of a server that is not jobkit: rank 0 must not take it for rank 1.
  const auto service = listen_on_loopback(4);
  const int server = service.fd;
  sockaddr_in addr = service.addr;
  std::thread other_service([&] {
    const int fd = ::accept(server, nullptr, nullptr);
    const std::string banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
    ::send(fd, banner.data(), banner.size(), MSG_NOSIGNAL);
    ::close(fd);
  });
  auto store = std::make_shared<memory_rendezvous_store>(2);
  std::thread fake_rank_1([&] {
    memory_rendezvous rv(store, 1);
    endpoint e;
    e.port = ntohs(addr.sin_port);
    e.host = "n1";
    e.node = 1;
    e.addresses = {"127.0.0.1"};
    rv.put("jobkit.endpoint", text_bytes(encode_endpoint(1, e)));
    rv.fence(20s);
  });
  memory_rendezvous rv(store, 0);
  tcp_fabric fabric(rv, rank_identity(0, {0, 1}), 20s, {.addresses = {"127.0.0.1"}});
  fake_rank_1.join();
  try {
    fabric.connect(1, "2-0#0", steady_clock::now() + 20s);
    FAIL("a non-jobkit service was taken for rank 1");
  } catch (const jobkit::error& e) {
    CHECK(contains(e.what(), "cannot connect to rank 1 (n1)"));
    CHECK(contains(e.what(), fmt::format("127.0.0.1 port {}", ntohs(addr.sin_port))));
    CHECK(contains(e.what(), "not a jobkit data path"));
  }
  other_service.join();
  ::close(server);
}

TEST_CASE("a rank that leaves during a collective fails every other rank, naming it", "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 1, 1}, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 3) throw jobkit::error(jobkit::errc::internal, "rank 3 leaves");
    return g.all_reduce(1, jobkit::reduce_op::sum, {.timeout = 20s});
  });
  for (int r = 0; r < 3; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "rank 3 (n1) left the group during all_reduce(sum) at test_transport_setup.cpp:"));
  }
}

TEST_CASE(
    "endpoints read on demand: no fence, each rank reads only its tree neighbours', a late rank is waited for, and "
    "later groups read only their new neighbours",
    "[transport]") {
  const std::vector<int> nodes{0, 0, 1, 1, 2, 2, 3, 3};  // rank 0 leads; 2, 4, 6 lead the others
  const int size = static_cast<int>(nodes.size());
  const test_support::inprocess_step step(nodes);
  struct seen {  // Catch2's assertions are for the main thread only
    std::optional<int> sum, pair_sum;
    std::string error, host_of_7;
    int awaits_world = 0, awaits_after = 0, fences = 0;
    bool on_demand = false, settled_after_creation = true, settled_after_broadcast = true, settled_after_reduce = false;
  };
  std::vector<seen> out(nodes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto& o = out[static_cast<std::size_t>(r)];
      try {
        if (r == 6) std::this_thread::sleep_for(500ms);  // a leader that starts late: its child waits for it
        test_support::rank_fabric under(step, r, fabric_settings{}.handshake_timeout);
        auto& rv = under.rv;
        auto& fabric = under.fabric;
        o.on_demand = fabric.on_demand();
        std::vector<int> all(nodes.size());
        std::iota(all.begin(), all.end(), 0);
        auto world = jobkit::detail::group_over(make_tcp_group_state(fabric, all, 20s));
        o.awaits_world = rv.awaits();
        o.settled_after_creation = fabric.settled();
        world.broadcast(1, {.root = 0});  // one way: proves nothing
        o.settled_after_broadcast = fabric.settled();
        o.sum = world.all_reduce(r + 1, jobkit::reduce_op::sum);
        o.settled_after_reduce = fabric.settled();  // every rank took part
        // Pairs across nodes (0-7, 1-6, 2-5, 3-4): each has a new parent to read.
        const std::vector<int> pair{std::min(r, size - 1 - r), std::max(r, size - 1 - r)};
        auto g = jobkit::detail::group_over(make_tcp_group_state(fabric, pair, 20s));
        o.pair_sum = g.all_reduce(r, jobkit::reduce_op::sum);
        o.awaits_after = rv.awaits() - o.awaits_world;
        o.fences = rv.fences();
        o.host_of_7 = fabric.host_of(7);
      } catch (const jobkit::error& e) {
        o.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << o.error);
    REQUIRE(o.sum);
    CHECK(*o.sum == 36);
    CHECK(o.pair_sum == size - 1);
    CHECK(o.fences == 0);
    CHECK(o.on_demand);
    CHECK_FALSE(o.settled_after_creation);
    CHECK_FALSE(o.settled_after_broadcast);
    CHECK(o.settled_after_reduce);
    CHECK(o.host_of_7 == "n3");
    // The world: a node-mate reads its leader's endpoint, a leader its parent's, rank 0 none;
    // reading the neighbours it accepts from begins only after a second of waiting.
    CHECK(o.awaits_world == (r == 0 ? 0 : 1));
    // A pair's second member connects to the first, whose endpoint it has read unless that is
    // its world parent or node leader.
    CHECK(o.awaits_after <= (r >= size / 2 ? 1 : 0));
  }
}

TEST_CASE("read on demand: a first collective over buffers settles the world's fabric, as every member took part",
          "[transport]") {
  struct seen {
    std::vector<int> buffer;
    bool settled_before, settled_after;
  };
  for (const bool gather : {false, true}) {
    INFO((gather ? "all_gather_into" : "broadcast_into"));
    const auto results = on_tcp_ranks({0, 0, 1, 1, 2, 2}, [gather](tcp_fabric& fabric, jobkit::group& world) {
      seen o{std::vector<int>(6, world.rank() == 0 ? 7 : -1), fabric.settled(), false};
      if (gather) {
        o.buffer[static_cast<std::size_t>(world.rank())] = world.rank();
        world.all_gather_into(std::span(o.buffer).subspan(static_cast<std::size_t>(world.rank()), 1), o.buffer);
      } else {
        world.broadcast_into(o.buffer, {.root = 0});
      }
      o.settled_after = fabric.settled();
      return o;
    });
    std::vector<int> expected(6, 7);
    if (gather) std::iota(expected.begin(), expected.end(), 0);
    for (const auto& o : results) {
      INFO(o.error);
      REQUIRE(o.value);
      CHECK(o.value->buffer == expected);
      CHECK_FALSE(o.value->settled_before);
      CHECK(o.value->settled_after);
    }
  }
}

TEST_CASE("read on demand: an endpoint that never comes is a lost node once the setup is over, named within the limit",
          "[transport]") {
  // Rank 1 of two never runs; rank 0 is told the setup is over (as after the world's first exchange).
  auto store = std::make_shared<memory_rendezvous_store>(2, std::vector<int>{0, 1});
  memory_rendezvous rv(store, 0);
  tcp_fabric fabric(rv, rank_identity(0, {0, 1}), 20s,
                    {.addresses = {"127.0.0.1"}, .silence_limit = std::chrono::milliseconds(2000)});
  REQUIRE(fabric.on_demand());
  fabric.settle();
  auto start = steady_clock::now();
  std::string connect_error, accept_error;
  try {
    fabric.connect(1, "k", steady_clock::now() + 30s);
  } catch (const jobkit::error& e) {
    connect_error = e.what();
    CHECK(e.code() == jobkit::errc::peer_failure);
  }
  const auto connect_took = steady_clock::now() - start;
  CHECK_THAT(connect_error, Catch::Contains("rank 1 (n1): its node n1 gave no answer for its endpoint for 2 s") &&
                                Catch::Contains("the node is lost or cut off"));
  CHECK(connect_took >= 1900ms);
  CHECK(connect_took < 15s);  // a correctness bound: generous for TSan under load
  start = steady_clock::now();
  try {
    fabric.accept({1}, "k", steady_clock::now() + 30s, 30s);
  } catch (const jobkit::error& e) {
    accept_error = e.what();
    CHECK(e.code() == jobkit::errc::peer_failure);
  }
  const auto accept_took = steady_clock::now() - start;
  CHECK_THAT(accept_error,
             Catch::Contains("rank 1 (n1) never connected: its node n1 gave no answer for its endpoint") &&
                 Catch::Contains("(its ranks: 1)"));
  CHECK(accept_took >= 2900ms);  // a second's grace, then the limit
  CHECK(accept_took < 15s);
}

TEST_CASE(
    "read on demand: before the setup is over a missing endpoint waits for the deadline; a placement that "
    "contradicts the identity is refused",
    "[transport]") {
  auto store = std::make_shared<memory_rendezvous_store>(2, std::vector<int>{0, 1});
  memory_rendezvous rv(store, 0);
  tcp_fabric fabric(rv, rank_identity(0, {0, 1}), 20s, {.addresses = {"127.0.0.1"}});
  const auto start = steady_clock::now();
  CHECK_THROWS_AS(fabric.connect(1, "k", steady_clock::now() + 1500ms), jobkit::timeout_error);
  CHECK(steady_clock::now() - start >= 1400ms);
  CHECK_THROWS_WITH(
      fabric.connect(1, "k", steady_clock::now() + 100ms),
      Catch::Contains("no endpoint from rank 1 (n1): rank 0: key 'jobkit.endpoint' of rank 1 was not committed"));

  auto other = std::make_shared<memory_rendezvous_store>(2, std::vector<int>{1, 0});
  memory_rendezvous wrong(other, 0);
  CHECK_THROWS_WITH(tcp_fabric(wrong, rank_identity(0, {0, 1}), 20s, {.addresses = {"127.0.0.1"}}),
                    Catch::Contains("the launcher places 2 of 2 ranks, this one on node 1 at local rank 0, but its "
                                    "identity says node 0 and local rank 0"));
}

TEST_CASE("JOBKIT_LOST_NODE_TIMEOUT: seconds, 8 by default, at least 2, named when wrong", "[transport]") {
  using jobkit::detail::lost_node_limit;
  CHECK(lost_node_limit(std::nullopt) == std::chrono::seconds(8));
  CHECK(lost_node_limit("2") == std::chrono::seconds(2));
  CHECK(lost_node_limit("2.5") == std::chrono::milliseconds(2500));
  for (const char* bad : {"", "0", "1", "1.9", "-3", "8s", "nan"}) {
    CHECK_THROWS_WITH(lost_node_limit(bad), Catch::Contains(std::string("JOBKIT_LOST_NODE_TIMEOUT='") + bad + "'"));
  }
}

TEST_CASE("a link of the data path is probed every second, and a link whose host answers is not silent",
          "[transport]") {
  using namespace jobkit::detail;
  const auto loopback = listen_on_loopback(1);
  const int listener = loopback.fd;
  sockaddr_in addr = loopback.addr;
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  set_link_options(client, std::chrono::seconds(3));
  REQUIRE((::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 || errno == EINPROGRESS));
  const int server = ::accept(listener, nullptr, nullptr);
  REQUIRE(server >= 0);
  const auto option = [&](int level, int name) {
    int value = 0;
    socklen_t size = sizeof value;
    ::getsockopt(client, level, name, &value, &size);
    return value;
  };
  CHECK(option(SOL_SOCKET, SO_KEEPALIVE) == 1);
  CHECK(option(IPPROTO_TCP, TCP_KEEPIDLE) == 1);
  CHECK(option(IPPROTO_TCP, TCP_KEEPINTVL) == 1);
  CHECK(option(IPPROTO_TCP, TCP_KEEPCNT) == 3);
  CHECK(option(IPPROTO_TCP, TCP_USER_TIMEOUT) == 0);  // it would end a link whose peer only stopped reading
  // The server never reads: the client fills the buffers, its window closes, and the server's
  // host keeps answering. Past the limit, the link is still not silent.
  std::vector<char> chunk(1 << 16);
  for (int i = 0; i < 1000 && ::send(client, chunk.data(), chunk.size(), MSG_DONTWAIT) > 0; ++i) {
  }
  // Long enough for the probes of the closed window to back off past the limit: each is answered.
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK_FALSE(link_silence(client, std::chrono::seconds(2)));
  }
  CHECK_FALSE(link_silence(server, std::chrono::seconds(2)));
  CHECK_FALSE(link_silence(listener, std::chrono::seconds(2)));  // not a connection
  ::close(client);
  ::close(server);
  ::close(listener);
}

TEST_CASE(
    "a refused connection is tried again with backoff, 8 times at most; a watched rank whose port is closed "
    "fails a group's creation at once",
    "[transport]") {
  auto store = std::make_shared<memory_rendezvous_store>(2);
  std::string connect_error, accept_error;
  std::chrono::milliseconds connect_took{}, accept_took{};
  std::atomic<bool> gone{false};
  std::thread gone_rank([&] {
    memory_rendezvous rv(store, 1);
    tcp_fabric fabric(rv, rank_identity(1, {0, 1}), 20s, {.addresses = {"127.0.0.1"}});
    gone = true;  // and its listener closes with it
  });
  memory_rendezvous rv(store, 0);
  tcp_fabric fabric(rv, rank_identity(0, {0, 1}), 20s, {.addresses = {"127.0.0.1"}});
  gone_rank.join();
  REQUIRE(gone);
  auto start = steady_clock::now();
  try {
    fabric.connect(1, "k", steady_clock::now() + 30s);
  } catch (const jobkit::error& e) {
    connect_error = e.what();
  }
  connect_took = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - start);
  CHECK_THAT(connect_error, Catch::Contains("cannot connect to rank 1 (n1)") && Catch::Contains("refused"));
  // Seven pauses of 50 ms to 1 s, each 0.5 to 1.5 times that: 1.78 s to 5.3 s in all.
  CHECK(connect_took >= 1700ms);
  CHECK(connect_took < 15s);

  start = steady_clock::now();
  try {
    fabric.accept({1}, "k", steady_clock::now() + 30s, 30s);
  } catch (const jobkit::error& e) {
    accept_error = e.what();
  }
  accept_took = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - start);
  CHECK_THAT(accept_error,
             Catch::Contains("rank 1 (n1) never connected: its node n1 refused a connection to its port"));
  CHECK(accept_took < 10s);  // a second of grace, then the first look
}

TEST_CASE("a group's failure flag is set on every member once a collective failed, and outlives the group",
          "[transport]") {
  // What an NCCL communicator's teardown reads (src/nccl/teardown.hpp): a peer failure that jobkit's
  // world group reported makes its end an abort.
  std::vector<std::shared_ptr<const std::atomic<bool>>> flags(3);
  const auto results = test_support::on_tcp_ranks({0, 0, 1}, [&](tcp_fabric& fabric, jobkit::group&) {
    auto state = make_tcp_group_state(fabric, {0, 1, 2}, 20s);
    const auto flag = state->link->failed_flag();
    flags[static_cast<std::size_t>(state->rank)] = flag;
    auto g = jobkit::detail::group_over(state);
    g.barrier();
    const bool before = flag->load();
    bool told = g.rank() == 1;
    if (g.rank() == 1) {
      g.abort("rank 1 gave up");
    } else {
      try {
        g.barrier();
      } catch (const jobkit::error& e) {
        told = std::string(e.what()).find("rank 1 gave up") != std::string::npos;
      }
    }
    return told && !before && flag->load();  // no Catch2 assertion on these threads
  });
  for (const auto& r : results) {
    INFO(r.error);
    REQUIRE(r.value);
    CHECK(*r.value);
  }
  for (const auto& flag : flags) {
    REQUIRE(flag);
    CHECK(flag->load());
  }
}
