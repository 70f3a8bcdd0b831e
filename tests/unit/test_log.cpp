// Rank-prefixed formatting, rank and level filters, and whole-line writes.
#include "jobkit/log.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "../catch.hpp"
#include "jobkit/error.hpp"

using jobkit::identity;
using jobkit::identity_source;
using jobkit::log_config;
using jobkit::log_level;
using jobkit::logger;
using jobkit::rank_filter;

namespace {

identity launched(int rank, int local_rank = 0) {
  identity id;
  id.rank = rank;
  id.world_size = 8;
  id.local_rank = local_rank;
  id.local_world_size = 4;
  id.node_rank = rank / 4;
  id.num_nodes = 2;
  id.hostname = "c1";
  id.source = identity_source::pmix;
  return id;
}

log_config config(std::string ranks = "main", log_level level = log_level::info, std::string prefix = "") {
  log_config c;
  c.level = level;
  c.ranks = rank_filter::parse(ranks, "JOBKIT_LOG_RANKS");
  c.prefix = std::move(prefix);
  return c;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const jobkit::error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("rank_prefixed_message uses the Lightning / SpeechBrain format", "[log]") {
  CHECK(jobkit::rank_prefixed_message("loss 0.5", launched(3)) == "[rank: 3] loss 0.5");
  CHECK(jobkit::rank_prefixed_message("loss 0.5", identity{}) == "loss 0.5");
}

TEST_CASE("log lines carry a rank prefix in a launched step only", "[log]") {
  CHECK(logger(launched(3), config("all")).format_line(log_level::info, "hi") == "[rank: 3] INFO: hi\n");
  CHECK(logger(identity{}, config()).format_line(log_level::warning, "hi") == "WARNING: hi\n");
}

TEST_CASE("the prefix pattern takes every identity field", "[log]") {
  const logger log(launched(5, 1), config("all", log_level::info,
                                          "{hostname}:{rank}/{world_size} l{local_rank}/{local_world_size} "
                                          "n{node_rank}/{num_nodes} {level} "));
  CHECK(log.format_line(log_level::error, "x") == "c1:5/8 l1/4 n1/2 ERROR x\n");
}

TEST_CASE("a bad prefix pattern is an error naming it", "[log][errors]") {
  for (const char* pattern : {"{bogus} ", "{rank", "{rank:d"}) {
    INFO(pattern);
    const auto message = error_of([&] { logger(launched(0), config("all", log_level::info, pattern)); });
    CHECK(contains(message, std::string("'") + pattern + "'"));
    CHECK(contains(message, "{rank}"));
  }
}

TEST_CASE("default filter: INFO and below from the main rank, WARNING and above everywhere", "[log]") {
  const logger main_rank(launched(0), config());
  const logger other(launched(5, 1), config());
  CHECK(main_rank.enabled(log_level::info));
  CHECK_FALSE(main_rank.enabled(log_level::debug));
  CHECK_FALSE(other.enabled(log_level::info));
  CHECK(other.enabled(log_level::warning));
  CHECK(other.enabled(log_level::error));
  CHECK_FALSE(other.enabled(log_level::off));
}

TEST_CASE("rank filters", "[log]") {
  auto admits = [](const char* filter, int rank, int local_rank) {
    return rank_filter::parse(filter).admits(launched(rank, local_rank));
  };
  CHECK(admits("all", 7, 3));
  CHECK(admits("main", 0, 0));
  CHECK_FALSE(admits("main", 4, 0));
  CHECK(admits("local-main", 4, 0));
  CHECK_FALSE(admits("local-main", 5, 1));
  CHECK(admits("0,3-5", 0, 0));
  CHECK(admits("0,3-5", 4, 0));
  CHECK(admits("0,3-5", 5, 1));
  CHECK_FALSE(admits("0,3-5", 2, 2));
  CHECK_FALSE(admits("0,3-5", 6, 2));
  CHECK(admits("7", 7, 3));
}

TEST_CASE("a bad rank filter names the variable and its value", "[log][errors]") {
  for (const char* text : {"", "x", "3-1", "1,", "1-", "-1", "0;1", "main,1"}) {
    INFO(text);
    const auto message = error_of([&] { rank_filter::parse(text, "JOBKIT_LOG_RANKS"); });
    CHECK(contains(message, std::string("JOBKIT_LOG_RANKS='") + text + "'"));
  }
}

TEST_CASE("level filter", "[log]") {
  const logger quiet(launched(0), config("all", log_level::warning));
  CHECK_FALSE(quiet.enabled(log_level::info));
  CHECK(quiet.enabled(log_level::warning));
  const logger chatty(launched(0), config("main", log_level::debug));
  CHECK(chatty.enabled(log_level::debug));
  const logger off(launched(0), config("all", log_level::off));
  CHECK_FALSE(off.enabled(log_level::error));
}

TEST_CASE("log_config reads JOBKIT_LOG_LEVEL, JOBKIT_LOG_RANKS and JOBKIT_LOG_PREFIX", "[log]") {
  setenv("JOBKIT_LOG_LEVEL", "Warning", 1);
  setenv("JOBKIT_LOG_RANKS", "local-main", 1);
  setenv("JOBKIT_LOG_PREFIX", "<{rank}> ", 1);
  const auto c = log_config::from_environment();
  CHECK(c.level == log_level::warning);
  CHECK(c.ranks.admits(launched(4, 0)));
  CHECK_FALSE(c.ranks.admits(launched(5, 1)));
  CHECK(logger(launched(4), c).format_line(log_level::error, "m") == "<4> m\n");

  setenv("JOBKIT_LOG_LEVEL", "loud", 1);
  CHECK(contains(error_of([] { log_config::from_environment(); }), "JOBKIT_LOG_LEVEL='loud'"));
  setenv("JOBKIT_LOG_LEVEL", "info", 1);
  setenv("JOBKIT_LOG_RANKS", "1-x", 1);
  CHECK(contains(error_of([] { log_config::from_environment(); }), "JOBKIT_LOG_RANKS='1-x'"));
  unsetenv("JOBKIT_LOG_LEVEL");
  unsetenv("JOBKIT_LOG_RANKS");
  unsetenv("JOBKIT_LOG_PREFIX");
}

TEST_CASE("fmt format strings are checked and formatted", "[log]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const logger log(launched(2), config("all"), fds[1]);
  log.info("step {} loss {:.2f}", 10, 0.123);
  log.debug("hidden {}", 1);
  close(fds[1]);
  char buffer[256] = {};
  const auto n = read(fds[0], buffer, sizeof buffer - 1);
  close(fds[0]);
  CHECK(std::string(buffer, static_cast<std::size_t>(n)) == "[rank: 2] INFO: step 10 loss 0.12\n");
}

TEST_CASE("lines from processes sharing a file never interleave", "[log]") {
  char path[] = "/tmp/jobkit-log-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(fcntl(fd, F_SETFL, O_APPEND) == 0);
  constexpr int writers = 4;
  constexpr int lines = 2000;
  const std::string payload(300, 'x');
  for (int w = 0; w < writers; ++w) {
    if (fork() == 0) {
      const logger log(launched(w), config("all"), fd);
      for (int i = 0; i < lines; ++i) log.info("{} {} {}", w, i, payload);
      _exit(0);
    }
  }
  for (int w = 0; w < writers; ++w) {
    int status = 0;
    wait(&status);
    CHECK(WIFEXITED(status));
  }
  close(fd);
  std::ifstream in(path);
  const std::regex shape(R"(\[rank: (\d)\] INFO: (\d) (\d+) x{300})");
  int count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, shape));
    CHECK(m[1] == m[2]);
  }
  unlink(path);
  CHECK(count == writers * lines);
}
