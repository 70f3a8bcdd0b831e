// The data path without a cluster: the tree layout, the handshake's pieces, the frame limits,
// and the real TCP tree over loopback with threads as ranks (a memory rendezvous stands in for
// PMIx), including strangers that connect to a rank's port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <set>
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
#include "rendezvous/rendezvous.hpp"
#include "support.hpp"
#include "transport/frame.hpp"
#include "transport/tree.hpp"
#include "transport/tree_layout.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::memory_rendezvous;
using test_support::memory_rendezvous_store;

namespace {

std::string hex(std::span<const std::byte> bytes) {
  std::string out;
  for (const auto b : bytes) out += fmt::format("{:02x}", static_cast<unsigned>(b));
  return out;
}

std::span<const std::byte> text_bytes(std::string_view text) { return as_bytes(text); }

jobkit::identity rank_identity(int rank, const std::vector<int>& nodes) {
  jobkit::identity id;
  id.rank = rank;
  id.world_size = static_cast<int>(nodes.size());
  id.node_rank = nodes[static_cast<std::size_t>(rank)];
  id.num_nodes = *std::max_element(nodes.begin(), nodes.end()) + 1;
  for (int r = 0; r < rank; ++r) id.local_rank += nodes[static_cast<std::size_t>(r)] == id.node_rank;
  id.local_world_size = static_cast<int>(std::count(nodes.begin(), nodes.end(), id.node_rank));
  id.hostname = fmt::format("n{}", id.node_rank);
  return id;
}

/// Runs fn(fabric, world group) on one thread per rank; nodes[r] is rank r's (pretend) node.
/// before_groups(rank, fabric) runs after the endpoint exchange, before the world group exists.
template <class F, class T = std::invoke_result_t<F&, tcp_fabric&, jobkit::group&>>
std::vector<test_support::outcome<T>> on_tcp_ranks(const std::vector<int>& nodes, F fn,
                                                   std::chrono::milliseconds handshake_timeout = 30s,
                                                   const std::function<void(int, tcp_fabric&)>& before_groups = {}) {
  const int size = static_cast<int>(nodes.size());
  // With the ranks' nodes the store serves direct reads: endpoints are read on demand, as under PMIx.
  auto store = std::make_shared<memory_rendezvous_store>(size, nodes);
  std::vector<test_support::outcome<T>> outcomes(nodes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto& out = outcomes[static_cast<std::size_t>(r)];
      try {
        memory_rendezvous rv(store, r);
        fabric_settings settings{.addresses = {"127.0.0.1"}, .handshake_timeout = handshake_timeout};
        tcp_fabric fabric(rv, rank_identity(r, nodes), 20s, settings);
        if (before_groups) before_groups(r, fabric);
        std::vector<int> all(static_cast<std::size_t>(size));
        std::iota(all.begin(), all.end(), 0);
        auto world = jobkit::detail::group_over(make_tcp_group_state(fabric, all, 20s));
        out.value.emplace(fn(fabric, world));
      } catch (const jobkit::error& e) {
        out.error = e.what();
        out.code = e.code();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

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

/// Rank 2 of these pretend nodes comes 1.5 s late to call(g), whose deadline is 500 ms: what ranks
/// 0 and 1 got, after checking that both timed out and that `what` is in each message.
template <class Call>
std::string late_rank_2(const std::vector<int>& nodes, Call call, const std::string& what) {
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) std::this_thread::sleep_for(1500ms);
    call(g);
    return true;
  });
  std::string errors;
  for (int r = 0; r < 2; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO(o.error);
    CHECK(o.code == jobkit::errc::timeout);
    CHECK(contains(o.error, what));
    errors += o.error;
  }
  return errors;
}

/// Waits until flag is set, for at most 10 s; returns whether it was.
bool wait_for(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!flag && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return flag;
}

/// The root's last call is a broadcast: it destroys its group (and its thread ends) before the
/// others call it. Every rank must get its value.
void check_root_that_left(const std::vector<int>& nodes, int root) {
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() != root) std::this_thread::sleep_for(300ms);
    return g.broadcast(g.rank() == root ? 42 : 0, root);
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 42);
  }
}

/// Every rank of these pretend nodes but `odd` broadcasts from rank 0 while `odd` calls a barrier;
/// then all call a barrier. What each got.
std::vector<test_support::outcome<bool>> barrier_against_broadcast(const std::vector<int>& nodes, int odd) {
  return on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == odd) {
      g.barrier();
    } else {
      g.broadcast(7, 0);
    }
    g.barrier({.timeout = 10s});
    return true;
  });
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

TEST_CASE("the endpoint key follows JOBKIT_ENDPOINT_GENERATION, and a bad one is named", "[transport]") {
  using jobkit::detail::endpoint_key;
  using jobkit::detail::map_environment;
  CHECK(endpoint_key(map_environment{}) == "jobkit.endpoint");
  CHECK(endpoint_key(map_environment{{"JOBKIT_ENDPOINT_GENERATION", ""}}) == "jobkit.endpoint");
  CHECK(endpoint_key(map_environment{{"JOBKIT_ENDPOINT_GENERATION", "1"}}) == "jobkit.endpoint.1");
  CHECK(endpoint_key(map_environment{{"JOBKIT_ENDPOINT_GENERATION", "1000"}}) == "jobkit.endpoint.1000");
  CHECK(jobkit::detail::endpoint_generation(map_environment{}) == 0);
  CHECK(jobkit::detail::endpoint_generation(map_environment{{"JOBKIT_ENDPOINT_GENERATION", "7"}}) == 7);
  for (const char* bad : {"0", "-1", "1001", "2x", " 2", "1.5", "99999999999999999999"}) {
    INFO(bad);
    try {
      (void)endpoint_key(map_environment{{"JOBKIT_ENDPOINT_GENERATION", bad}});
      FAIL("accepted");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::invalid_environment);
      CHECK(contains(e.what(), fmt::format("JOBKIT_ENDPOINT_GENERATION='{}'", bad)));
    }
  }
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

TEST_CASE("the TCP tree over loopback: every collective, groups and splits", "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1, 1, 2, 2};  // 3 pretend nodes: leaders 0, 3 and 5
  const auto results = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    std::vector<int> got;
    got.push_back(g.all_reduce(g.rank(), jobkit::reduce_op::sum));
    got.push_back(g.broadcast(g.rank() * 10, {.root = 5}));
    const auto gathered = g.all_gather(std::string(static_cast<std::size_t>(g.rank()), 'x'));
    got.push_back(static_cast<int>(gathered.at(6).size()));
    got.push_back(g.scatter(std::vector<int>{10, 11, 12, 13, 14, 15, 16}, 3));
    got.push_back(g.all_reduce(std::string(1, static_cast<char>('a' + g.rank())),
                               [](const std::string& a, const std::string& b) { return a + b; }) == "abcdefg");
    auto half = g.split(g.rank() % 2, -g.rank());  // ordered by descending rank
    got.push_back(half->size());
    got.push_back(half->world_ranks().front());
    got.push_back(half->all_reduce(1, jobkit::reduce_op::sum));
    return got;
  });
  for (int r = 0; r < 7; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << o.error);
    REQUIRE(o.value);
    const int even = r % 2 == 0;
    CHECK(*o.value == std::vector<int>{21, 50, 6, 10 + r, 1, even ? 4 : 3, even ? 6 : 5, even ? 4 : 3});
  }
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
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  REQUIRE(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(server, 4) == 0);
  REQUIRE(::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
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
    CHECK(contains(o.error, "rank 3 (n1) left the group during all_reduce(sum) at test_transport.cpp:"));
  }
}

TEST_CASE("node-mates in shared memory: large payloads in both directions, every delivery, no name left",
          "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1, 0};  // rank 4 is rank 0's node-mate, after rank 3 of node 1
  const auto results = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    const auto text = [](int r, std::size_t size) { return std::string(size, static_cast<char>('a' + r)); };
    std::vector<std::size_t> got;
    // 100 KiB from each rank: past a slot's 7 KiB, through the data region both ways.
    const auto all = g.all_gather(text(g.rank(), 100 * 1024 + static_cast<std::size_t>(g.rank())));
    for (int r = 0; r < g.size(); ++r) got.push_back(all[static_cast<std::size_t>(r)] == text(r, 100 * 1024 + r));
    got.push_back(g.broadcast(text(2, 3 << 20), {.root = 2}) == text(2, 3 << 20));  // a node-mate's 3 MiB
    const auto gathered = g.gather(text(g.rank(), 9000), {.root = 4});
    got.push_back(g.rank() == 4 ? gathered.size() == 5 && gathered[3] == text(3, 9000) : gathered.empty());
    got.push_back(g.scatter(std::vector<std::string>{"0", "1", "2", "3", std::string(20000, '4')}, {.root = 1}) ==
                  (g.rank() == 4 ? std::string(20000, '4') : std::to_string(g.rank())));
    got.push_back(
        static_cast<std::size_t>(g.all_reduce(std::vector<int>(5000, g.rank()), jobkit::reduce_op::sum)[4999]));
    g.barrier();
    // The segments were unlinked once every node-mate had mapped them: their names are gone
    // while the groups still use them.
    const auto prefix = fmt::format("jobkit-pid{}-", ::getpid());
    std::size_t named = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
      named += entry.path().filename().string().starts_with(prefix);
    got.push_back(named);
    g.barrier();
    return got;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<std::size_t>{1, 1, 1, 1, 1, 1, 1, 1, 10, 0});
  }
}

TEST_CASE("node-mates in shared memory: out of step, a throwing callable, a late node-mate", "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1};
  const auto mismatch = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) return g.broadcast(1, {.root = 0, .timeout = 20s});
    g.barrier({.timeout = 20s});
    return 0;
  });
  for (const auto& o : mismatch) {
    INFO(o.error);
    CHECK(contains(o.error, "collectives out of step: "));
    CHECK(contains(o.error, "rank 2 (n0) is in broadcast(root 0) #2 at test_transport.cpp:"));
    CHECK(contains(o.error, "rank 0 (n0) is in barrier #2 at test_transport.cpp:"));
  }

  const auto thrown = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    return g.compute_and_broadcast([]() -> int { throw jobkit::error(jobkit::errc::io, "disk full"); }, {.root = 1});
  });
  CHECK(thrown[1].error == "disk full");  // the root gets its own exception back
  for (const int r : {0, 2, 3}) {
    CHECK(contains(thrown[static_cast<std::size_t>(r)].error, "the callable threw on rank 1 (n0): disk full"));
  }

  const auto late = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) std::this_thread::sleep_for(1500ms);
    g.barrier({.timeout = 500ms});
    return 0;
  });
  CHECK(late[0].code == jobkit::errc::timeout);
  INFO(late[0].error);
  CHECK(contains(late[0].error, "timed out after 500 ms on rank "));
  CHECK(contains(late[0].error, "(n0): rank(s) 2 never arrived"));
  for (const auto& o : late) CHECK(o.code == jobkit::errc::timeout);
}

TEST_CASE("bulk exchanges over the tree: buffer to buffer across nodes and in shared memory", "[transport]") {
  const std::vector<int> nodes{0, 0, 1, 2, 2, 0, 1};  // leaders 0, 2 and 3; cyclic node-mates
  const auto value = [](int from, std::size_t k) { return static_cast<std::uint32_t>(from * 1'000'003 + k); };
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    std::vector<int> ok;
    // Empty, inline in a slot, and several 1 MiB chunks with an odd tail, from a leader and a node-mate.
    for (const std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{700'001}}) {
      for (const int root : {0, 4, 6}) {
        std::vector<std::uint32_t> buffer(count, 0);
        if (g.rank() == root) {
          for (std::size_t k = 0; k < count; ++k) buffer[k] = value(root, k);
        }
        g.broadcast_into(buffer, root);
        bool same = true;
        for (std::size_t k = 0; k < count; ++k) same = same && buffer[k] == value(root, k);
        ok.push_back(same);
      }
      const std::size_t piece = count / 7 + 1;
      std::vector<std::uint32_t> mine(piece), all(piece * 7);
      for (std::size_t k = 0; k < piece; ++k) mine[k] = value(g.rank(), k);
      g.all_gather_into(mine, all);
      bool same = true;
      for (int r = 0; r < 7; ++r) {
        for (std::size_t k = 0; k < piece; ++k)
          same = same && all[static_cast<std::size_t>(r) * piece + k] == value(r, k);
      }
      ok.push_back(same);
    }
    ok.push_back(g.all_reduce(1, jobkit::reduce_op::sum));  // value collectives stay in step
    return ok;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7});
  }
}

TEST_CASE("bulk exchanges: a size that differs on one rank fails every rank, naming it", "[transport]") {
  for (const int odd : {1, 2}) {  // a node-mate of the leader, then another node's leader
    const auto results = on_tcp_ranks({0, 0, 1}, [&](tcp_fabric&, jobkit::group& g) {
      std::vector<char> buffer(g.rank() == odd ? 101 : 100);
      g.broadcast_into(buffer, 0);
      return true;
    });
    for (const auto& o : results) {
      INFO(o.error);
      CHECK_FALSE(o.value);
      CHECK(o.code == jobkit::errc::invalid_argument);
      CHECK(contains(o.error, fmt::format("rank {} (", odd)));
      CHECK(contains(o.error, "passed a buffer of 101 bytes but rank 0 ("));
    }
  }
}

TEST_CASE("reduce_into: in place, in rank order across nodes and node-mates; a signature that differs is named",
          "[transport]") {
  // 2x2 integer matrices multiplied: associative but not commutative, so the product shows the order.
  using matrix = std::array<std::int64_t, 4>;
  const auto times = [](const matrix& a, const matrix& b) {
    return matrix{a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2],
                  a[2] * b[1] + a[3] * b[3]};
  };
  const auto of_rank = [](int r) { return matrix{1, r + 1, r % 2, 1}; };
  const std::vector<int> nodes{0, 0, 1, 1, 1, 2};
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    std::vector<matrix> data(1000, of_rank(g.rank()));
    const auto* before = data.data();
    g.reduce_into(std::as_writable_bytes(std::span(data)),
                  [&](std::span<std::byte> acc, std::span<const std::byte> in) {
                    for (std::size_t i = 0; i < acc.size() / sizeof(matrix); ++i) {
                      matrix a;
                      matrix b;
                      std::memcpy(&a, acc.data() + i * sizeof(matrix), sizeof a);
                      std::memcpy(&b, in.data() + i * sizeof(matrix), sizeof b);
                      a = times(a, b);
                      std::memcpy(acc.data() + i * sizeof(matrix), &a, sizeof a);
                    }
                  });
    return std::make_pair(data.data() == before, std::set<matrix>(data.begin(), data.end()));
  });
  matrix product = of_rank(0);
  for (int r = 1; r < static_cast<int>(nodes.size()); ++r) product = times(product, of_rank(r));
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(o.value->first);
    CHECK(o.value->second == std::set<matrix>{product});
  }
  const auto mismatched = on_tcp_ranks({0, 0, 1}, [](tcp_fabric&, jobkit::group& g) {
    std::vector<float> data(4, 1.0F);
    g.reduce_into(std::as_writable_bytes(std::span(data)), [](std::span<std::byte>, std::span<const std::byte>) {},
                  {.signature = g.rank() == 2 ? "int32[4]" : "float32[4]"});
    return true;
  });
  for (const auto& o : mismatched) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "rank 2 (n1)"));
    CHECK(contains(o.error, "reduce_into of int32[4]"));
    CHECK(contains(o.error, "reduce_into of float32[4]"));
  }
}

TEST_CASE("bulk exchanges: out of step with a value collective, and a late rank, are named", "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 1}, [](tcp_fabric&, jobkit::group& g) {
    std::vector<char> buffer(64);
    if (g.rank() == 1) {
      g.barrier();
    } else {
      g.broadcast_into(buffer, 0);
    }
    return true;
  });
  for (const auto& o : results) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
    CHECK(contains(o.error, "barrier"));
    CHECK(contains(o.error, "broadcast_into(root 0)"));
  }
  const auto late = late_rank_2(
      {0, 1, 1},
      [](jobkit::group& g) {
        std::vector<int> all(3);
        g.all_gather_into(std::vector<int>{g.rank()}, all, {.timeout = 500ms});
      },
      "all_gather_into at");
  CHECK(contains(late, "rank(s) 2 never arrived"));
}

TEST_CASE("a barrier on one node: the last to arrive releases the others; mismatch and lateness named", "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    int sum = 0;
    for (int i = 0; i < 300; ++i) {
      if (g.rank() == i % 4) std::this_thread::yield();  // a different rank arrives last each time
      g.barrier();
      if (i % 50 == 0) sum += g.all_reduce(g.rank() + i, jobkit::reduce_op::sum);
      if (i % 100 == 1) {  // collectives where only some ranks contribute take the leader's way
        sum += g.broadcast(i, {.root = 3}) - i;
        sum += static_cast<int>(g.gather(g.rank(), {.root = 2}).size()) - (g.rank() == 2 ? 4 : 0);
      }
    }
    return sum;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 6 * 6 + 4 * (0 + 50 + 100 + 150 + 200 + 250));
  }
  // The leader, then a node-mate, in another collective; then the leader as a late source, which
  // reaches its next barrier and releases it while the others still wait in theirs. A broadcast's
  // source does not wait for the others: it learns of it at its next collective.
  for (const auto& [odd, late] : {std::pair{0, false}, std::pair{2, false}, std::pair{0, true}}) {
    const auto mismatched = on_tcp_ranks({0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
      g.barrier();
      if (g.rank() == odd) {
        if (late) std::this_thread::sleep_for(50ms);
        g.broadcast(1, 0);
      } else {
        g.barrier();
      }
      g.barrier({.timeout = 10s});
      return true;
    });
    for (const auto& o : mismatched) {
      INFO("odd " << odd << (late ? " (late)" : "") << ": " << o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "collectives out of step"));
      CHECK(contains(o.error, "broadcast(root 0)"));
    }
  }
  late_rank_2(
      {0, 0, 0}, [](jobkit::group& g) { g.barrier({.timeout = 500ms}); }, "rank(s) 2 never arrived");
}

TEST_CASE(
    "all_gather and all_reduce on one node: each member reads the others' parts, the last to arrive "
    "finishes past a part; large pieces, a throwing op, mismatch and lateness named",
    "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    const auto piece = [](int r, int i) {
      // Every 5th exchange one rank's piece (a different one each time) is past a slot's 7 KiB.
      const bool large = i % 5 == 0 && r == (i / 5) % 4;
      return std::string(large ? 20000 + static_cast<std::size_t>(i) : static_cast<std::size_t>(r + i % 7),
                         static_cast<char>('a' + r));
    };
    int wrong = 0;
    for (int i = 0; i < 200; ++i) {
      if (g.rank() == (i + 1) % 4) std::this_thread::yield();  // a different rank arrives last each time
      const auto all = g.all_gather(piece(g.rank(), i));
      for (int r = 0; r < 4; ++r) wrong += all[static_cast<std::size_t>(r)] != piece(r, i);
      wrong += g.all_reduce(g.rank() * 10 + i, jobkit::reduce_op::sum) != 60 + 4 * i;
      if (i % 20 == 0) {  // 12 KB from every rank: past a slot, through the data region
        const auto sums = g.all_reduce(std::vector<int>(3000, g.rank() + i), jobkit::reduce_op::max);
        wrong += sums.size() != 3000 || sums.front() != 3 + i || sums.back() != 3 + i;
      }
      // Not associative: applied in rank order, whichever rank applies it.
      wrong +=
          g.all_reduce(std::to_string(g.rank()), [](std::string a, const std::string& b) { return b + a; }) != "3210";
    }
    return wrong;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 0);
  }

  // How late the rank chosen to arrive last comes: 100 ms once lost to a leader that was slower
  // still to leave the barrier before it, in a loaded CI run (rank 0 applied the op, not rank 3);
  // a second leaves room for TSan on a loaded machine.
  static constexpr auto last_by = 1s;
  // Contributions that fit in a part: every member applies the op itself, in rank order.
  {
    std::atomic<int> applications{0};
    const auto each = on_tcp_ranks({0, 0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
      return g.all_reduce(g.rank(), [&](int a, int b) {
        ++applications;
        return a + b;
      });
    });
    for (const auto& o : each) {
      INFO(o.error);
      REQUIRE(o.value);
      CHECK(*o.value == 6);
    }
    CHECK(applications == 4 * 3);
  }
  // Past a part, the last to arrive applies the op: the leader, or a node-mate. 150 KB pieces
  // from every rank make that member grow the data region too (it starts at 64 KiB).
  const auto past_a_part = [](int r) { return std::vector<int>(3000, r); };  // 12 KB
  const auto add = [](std::vector<int> a, const std::vector<int>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };
  for (const int last : {0, 2, 3}) {
    std::atomic<int> applied_by{-1};
    const auto finished = on_tcp_ranks({0, 0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
      const auto big = [](int r) {
        return std::string(150000 + static_cast<std::size_t>(r), static_cast<char>('a' + r));
      };
      g.barrier();
      if (g.rank() == last) std::this_thread::sleep_for(last_by);
      const auto all = g.all_gather(big(g.rank()));
      bool right = all.size() == 4;
      for (int r = 0; right && r < 4; ++r) right = all[static_cast<std::size_t>(r)] == big(r);
      g.barrier();
      if (g.rank() == last) std::this_thread::sleep_for(last_by);
      const auto sum = g.all_reduce(past_a_part(g.rank()), [&](std::vector<int> a, const std::vector<int>& b) {
        applied_by = g.rank();
        return add(std::move(a), b);
      });
      return right && sum == std::vector<int>(3000, 6);
    });
    for (const auto& o : finished) {
      INFO("last " << last << ": " << o.error);
      REQUIRE(o.value);
      CHECK(*o.value);
    }
    CHECK(applied_by == last);
  }

  // The rank that applies the op gets its exception back; the others a jobkit::error naming it.
  // Within a part every member applies it (each gets its own); past one, the last (rank 2).
  for (const bool past : {false, true}) {
    const auto thrown = on_tcp_ranks({0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
      try {
        g.barrier();
        if (g.rank() == 2) std::this_thread::sleep_for(last_by);
        if (past) {
          g.all_reduce(past_a_part(g.rank()), [](std::vector<int>, const std::vector<int>&) -> std::vector<int> {
            throw std::runtime_error("overflow");
          });
        } else {
          g.all_reduce(g.rank(), [](int, int) -> int { throw std::runtime_error("overflow"); });
        }
      } catch (const jobkit::error& e) {
        return std::string(e.what());
      } catch (const std::runtime_error& e) {
        return std::string("own: ") + e.what();
      }
      return std::string();
    });
    int own = 0;
    for (const auto& o : thrown) {
      REQUIRE(o.value);
      INFO(*o.value);
      own += o.value->starts_with("own: ");
      CHECK(contains(*o.value, "overflow"));
    }
    CHECK(own == (past ? 1 : 3));
    CHECK(thrown[2].value->starts_with("own: "));
  }

  // Everyone arrived, but the finisher's operation (past a part) outlasts the others' deadline:
  // they name it, and it fails as they did instead of publishing. Rank 2 comes last but well
  // within the deadline.
  const auto slow = on_tcp_ranks({0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) std::this_thread::sleep_for(300ms);
    return g.all_reduce(past_a_part(g.rank()),
                        [&](std::vector<int> a, const std::vector<int>& b) {
                          std::this_thread::sleep_for(3s);
                          return add(std::move(a), b);
                        },
                        {.timeout = 2s});
  });
  for (const auto& o : slow) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(o.code == jobkit::errc::timeout);
    CHECK(contains(o.error,
                   "every rank arrived, but rank 2 (n0), which arrived last and finishes the exchange, "
                   "did not publish the result"));
  }
  const auto sizes = on_tcp_ranks({0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    return g.all_reduce(std::vector<int>(g.rank() == 1 ? 3 : 2, 1), jobkit::reduce_op::sum).size();
  });
  for (const auto& o : sizes) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "rank 1"));
  }

  // Out of step with a collective of the leader's way (gather), each side last in turn, and with
  // a barrier: every rank names both call sites.
  for (const int odd : {0, 1, 2}) {
    const auto mismatched = on_tcp_ranks({0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
      g.barrier();
      if (g.rank() == odd) {
        if (odd == 2) std::this_thread::sleep_for(50ms);
        g.gather(1, {.root = 0, .timeout = 10s});
      } else {
        if (odd != 2) std::this_thread::sleep_for(50ms);
        g.all_reduce(1, jobkit::reduce_op::sum, {.timeout = 10s});
      }
      return true;
    });
    for (const auto& o : mismatched) {
      INFO("odd " << odd << ": " << o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "collectives out of step"));
      CHECK(contains(o.error, "gather(root 0)"));
      CHECK(contains(o.error, "all_reduce(sum)"));
    }
  }
  const auto against_barrier = on_tcp_ranks({0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
    if (g.rank() == 1) {
      g.barrier({.timeout = 10s});
    } else {
      g.all_gather(g.rank(), {.timeout = 10s});
    }
    return true;
  });
  for (const auto& o : against_barrier) {
    INFO(o.error);
    CHECK(contains(o.error, "collectives out of step"));
    CHECK(contains(o.error, "barrier #1"));
    CHECK(contains(o.error, "all_gather #1"));
  }
  late_rank_2(
      {0, 0, 0}, [](jobkit::group& g) { g.all_gather(g.rank(), {.timeout = 500ms}); }, "rank(s) 2 never arrived");
  late_rank_2(
      {0, 0, 0, 0},
      [](jobkit::group& g) { g.all_reduce(std::vector<int>(5000, 1), jobkit::reduce_op::sum, {.timeout = 500ms}); },
      "rank(s) 2 never arrived");
}

TEST_CASE("broadcasts on one node: back to back from every root, growing payloads, mismatch, a late root",
          "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    const auto text = [](int i) {
      return std::string(static_cast<std::size_t>(i % 7 == 0 ? 70'000 + i : i), 'a' + i % 26);
    };
    int right = 0;
    // No barrier between them; payloads past the data region's first size make it grow.
    for (int i = 0; i < 400; ++i) {
      const int root = i % 4;
      right += g.broadcast(g.rank() == root ? text(i) : std::string(), root) == text(i);
      if (i % 97 == 0) right += g.all_gather(g.rank()).size() == 4;  // the leader's way in between
    }
    return right;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 400 + 5);
  }
  for (const int odd : {0, 1, 3}) {  // the root (the leader), then two node-mates
    // Every rank must learn of it (in this collective or at its next one); none may pair the two.
    for (const auto& o : barrier_against_broadcast({0, 0, 0, 0}, odd)) {
      INFO("odd " << odd << ": " << o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "out of step"));
    }
  }
  late_rank_2(
      {0, 0, 0}, [](jobkit::group& g) { g.broadcast(1, {.root = 2, .timeout = 500ms}); }, "rank(s) 2 never arrived");
}

TEST_CASE("a broadcast on one node does not wait for the others: the source runs ahead as far as its mail goes",
          "[transport]") {
  // Rank 3 starts reading only once the source posted node_segment::mailboxes (8) broadcasts; the
  // source's 9th must wait until rank 3 took the 1st, so none is overwritten before it is taken.
  std::atomic<bool> eight_posted{false};
  std::atomic<bool> slow_reader_started{false};
  bool saw_eight_posted = false;
  bool ninth_waited = false;
  const auto results = on_tcp_ranks({0, 0, 0, 0}, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 3) {
      saw_eight_posted = wait_for(eight_posted);
      slow_reader_started = true;
    }
    long sum = 0;
    for (int i = 0; i < 200; ++i) {
      sum += g.broadcast(g.rank() == 0 ? i * 3 : -1, 0);
      if (g.rank() == 0 && i == 7) eight_posted = true;
      if (g.rank() == 0 && i == 8) ninth_waited = slow_reader_started;
    }
    return sum;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 3 * 199 * 200 / 2);
  }
  CHECK(saw_eight_posted);
  CHECK(ninth_waited);

  const auto never_taken = on_tcp_ranks({0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) {
      std::this_thread::sleep_for(2s);
      return 0;
    }
    int last = 0;
    for (int i = 0; i < 20; ++i) last = g.broadcast(i, {.root = 0, .timeout = 500ms});
    return last;
  });
  for (int r = 0; r < 2; ++r) {  // the source, and a member whose next broadcast the source cannot post
    const auto& o = never_taken[static_cast<std::size_t>(r)];
    INFO(o.error);
    CHECK(o.code == jobkit::errc::timeout);
    CHECK(contains(o.error, "rank(s) 2 never took broadcast(root 0) #2 at test_transport.cpp:"));
  }

  // Two ranks that each believe themselves the root: never paired, named on every rank.
  const auto two_sources = on_tcp_ranks({0, 0, 0}, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    g.broadcast(g.rank(), g.rank() == 2 ? 2 : 0);
    g.barrier({.timeout = 10s});
    return true;
  });
  for (const auto& o : two_sources) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
  }

  check_root_that_left({0, 0, 0}, 1);
}

TEST_CASE("a broadcast across nodes goes one way: the root runs ahead, leaders pass it on, mismatch and lateness named",
          "[transport]") {
  // Leaders 0 (n0), 1 (n1), 2 (n2) and 6 (n3); leader 6 hangs under leader 2, so bytes are
  // passed on twice; the others are node-mates.
  const std::vector<int> nodes{0, 1, 2, 0, 1, 2, 3, 3};
  const auto text = [](int i) {
    return std::string(static_cast<std::size_t>(i % 9 == 0 ? 9'000 + i : i), 'a' + i % 26);
  };
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    int right = 0;
    // No barrier between them; every 9th is too large for one way and takes the tree.
    for (int i = 0; i < 300; ++i) {
      right += g.broadcast(g.rank() == 0 ? text(i) : std::string(), 0) == text(i);
      if (i % 37 == 0) right += g.all_reduce(1, jobkit::reduce_op::sum) == 8;
      if (i % 53 == 0) {
        std::vector<int> values(5000, g.rank() == 0 ? i : -1);
        g.broadcast_into(values, 0);
        right += values[4999] == i;
      }
    }
    return right;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 300 + 9 + 6);
  }

  // The root posts 5 broadcasts and returns from each while rank 7 (under leader 6, two hops
  // away) has not called any.
  std::atomic<bool> root_done{false};
  bool root_ran_ahead = false;
  const auto ahead = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 7) {
      root_ran_ahead = wait_for(root_done);
    }
    int sum = 0;
    for (int i = 0; i < 5; ++i) sum += g.broadcast(g.rank() == 0 ? i + 1 : 0, 0);
    if (g.rank() == 0) root_done = true;
    return sum;
  });
  for (const auto& o : ahead) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 15);
  }
  CHECK(root_ran_ahead);

  // One rank in a barrier while the others broadcast: the root, a leader that passes the bytes
  // on, a leaf leader, a node-mate. Every rank learns of it (in this collective or its next),
  // as out of step, not at a deadline.
  for (const int odd : {0, 2, 6, 7}) {
    for (const auto& o : barrier_against_broadcast(nodes, odd)) {
      INFO("odd " << odd << ": " << o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "out of step"));
      CHECK(contains(o.error, "broadcast(root 0) #2 at test_transport.cpp:"));
      CHECK(contains(o.error, "barrier #2 at test_transport.cpp:"));
    }
  }

  check_root_that_left(nodes, 0);

  // A late root: the leaders and the node-mates time out, naming it.
  const auto late_root = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 0) std::this_thread::sleep_for(1500ms);
    return g.broadcast(1, {.root = 0, .timeout = 500ms});
  });
  CHECK_FALSE(late_root[0].value);  // the failures reached it, as aborts behind the receipts
  for (int r = 1; r < 8; ++r) {
    const auto& o = late_root[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << o.error);
    CHECK(o.code == jobkit::errc::timeout);
    // The root's node-mate (rank 3) waits for the root itself; the others for the bytes it passes on.
    CHECK(contains(o.error, r == 3 ? "rank(s) 0 never arrived" : "rank 0 or a rank between never arrived"));
  }
}

TEST_CASE("a leader waiting for a late root's broadcast still watches its children", "[transport]") {
  // Rank 6 (a leaf leader under leader 2) calls a barrier while the others broadcast; the root is
  // late. Leader 2 must name the mismatch before the root arrives, not wait for it.
  const std::vector<int> nodes{0, 1, 2, 0, 1, 2, 3, 3};
  std::atomic<bool> leader_failed{false};
  bool failed_before_root = false;
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 0) {
      failed_before_root = wait_for(leader_failed);
    }
    if (g.rank() == 6) {
      g.barrier();
      return 0;
    }
    try {
      g.broadcast(5, 0);
    } catch (const jobkit::error&) {
      if (g.rank() == 2) leader_failed = true;
      throw;
    }
    g.barrier({.timeout = 10s});  // where the ranks that got the bytes learn of it
    return 5;
  });
  CHECK(failed_before_root);
  const auto& leader = results[2];
  INFO(leader.error);
  CHECK(contains(leader.error, "collectives out of step"));
  CHECK(contains(leader.error, "rank 6 (n3) is in barrier #2 at test_transport.cpp:"));
  CHECK(contains(leader.error, "broadcast(root 0) #2"));
  for (const auto& o : results) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
  }
}

TEST_CASE(
    "endpoints read on demand: no fence, each rank reads only its tree neighbours', a late rank is waited for, and "
    "later groups read only their new neighbours",
    "[transport]") {
  const std::vector<int> nodes{0, 0, 1, 1, 2, 2, 3, 3};  // rank 0 leads; 2, 4, 6 lead the others
  const int size = static_cast<int>(nodes.size());
  auto store = std::make_shared<memory_rendezvous_store>(size, nodes);
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
        memory_rendezvous rv(store, r);
        tcp_fabric fabric(rv, rank_identity(r, nodes), 20s, {.addresses = {"127.0.0.1"}});
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
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
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
