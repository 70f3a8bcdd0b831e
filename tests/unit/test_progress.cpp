// Progress tracking without a cluster (src/progress): the knobs, the learned bound (first step,
// steps, checkpoint phases, long steps, which boundaries count), the straggler scores, the carried
// bound's file, and the process's tracker end to end: its `hang` event, once per hang.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "core/environment.hpp"
#include "jobkit/error.hpp"
#include "jobkit/progress.hpp"
#include "progress/learner.hpp"
#include "progress/tracker.hpp"
#include "where/record.hpp"

using namespace jobkit::detail;

namespace {

progress_settings quick() {
  progress_settings s;
  s.enabled = true;
  s.factor = 5;
  s.floor = 1;
  s.first_step = 10;
  s.checkpoint_floor = 3;
  s.straggler_every = 4;
  return s;
}

bool near(double a, double b) { return std::abs(a - b) < 1e-6; }

std::string refusal_of(const map_environment& env) {
  try {
    progress_settings_from(env);
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("progress settings: on in a Slurm step, the defaults, and each malformed knob named") {
  CHECK_FALSE(progress_settings_from(map_environment{}).enabled);
  CHECK_FALSE(progress_settings_from(map_environment{{"SLURM_JOB_ID", "7"}}).enabled);
  const auto on = progress_settings_from(map_environment{{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}});
  CHECK(on.enabled);
  CHECK(on.factor == 5);
  CHECK(on.floor == 60);
  CHECK(on.first_step == 600);
  CHECK(on.checkpoint_floor == 300);
  CHECK(on.straggler_every == 20);
  CHECK(on.straggler_threshold == 0.75);
  CHECK_FALSE(on.set_bound);
  CHECK_FALSE(progress_settings_from(map_environment{{"SLURM_JOB_ID", "7"},
                                                     {"SLURM_STEP_ID", "0"},
                                                     {"JOBKIT_PROGRESS", "0"},
                                                     {"JOBKIT_PROGRESS_FACTOR", "x"}})
                  .enabled);  // off: the other knobs are not read
  const auto set = progress_settings_from(map_environment{{"JOBKIT_PROGRESS", "1"},
                                                          {"JOBKIT_PROGRESS_BOUND", "120"},
                                                          {"JOBKIT_PROGRESS_FACTOR", "3.5"},
                                                          {"JOBKIT_PROGRESS_FLOOR", "2.5"},
                                                          {"JOBKIT_PROGRESS_FIRST_STEP", "30"},
                                                          {"JOBKIT_PROGRESS_CHECKPOINT_FLOOR", "40"},
                                                          {"JOBKIT_STRAGGLER_EVERY", "0"},
                                                          {"JOBKIT_STRAGGLER_THRESHOLD", "0.5"},
                                                          {"JOBKIT_STRAGGLER_RESOLUTION", "0.02"}});
  CHECK(set.enabled);
  CHECK(set.set_bound == 120);
  CHECK(set.factor == 3.5);
  CHECK(set.floor == 2.5);
  CHECK(set.first_step == 30);
  CHECK(set.checkpoint_floor == 40);
  CHECK(set.straggler_every == 0);
  CHECK(set.straggler_threshold == 0.5);
  CHECK(set.straggler_resolution == 0.02);
  CHECK(progress_settings_from(map_environment{{"JOBKIT_PROGRESS", "1"}}).straggler_resolution == 0.001);
  CHECK(progress_settings_from(map_environment{{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_STRAGGLER_RESOLUTION", "0"}})
            .straggler_resolution == 0);

  CHECK(refusal_of({{"JOBKIT_PROGRESS", "yes"}}) == "JOBKIT_PROGRESS='yes': must be 0 (off) or 1 (on)");
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_PROGRESS_BOUND", "ten"}}) ==
        "JOBKIT_PROGRESS_BOUND='ten': must be more than 0 seconds, finite and at most 1e9 (e.g. 300 or 2.5)");
  for (const char* bad : {"0", "-5", "inf", "nan", "1e10", "", "60s"}) {
    INFO(bad);
    CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_PROGRESS_FLOOR", bad}})
              .starts_with(std::string("JOBKIT_PROGRESS_FLOOR='") + bad + "'"));
  }
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_PROGRESS_FACTOR", "0.5"}}) ==
        "JOBKIT_PROGRESS_FACTOR='0.5': must be a number from 1 to 1000 (e.g. 5)");
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_PROGRESS_FIRST_STEP", "abc"}})
            .starts_with("JOBKIT_PROGRESS_FIRST_STEP='abc'"));
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_PROGRESS_CHECKPOINT_FLOOR", "-1"}})
            .starts_with("JOBKIT_PROGRESS_CHECKPOINT_FLOOR='-1'"));
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_STRAGGLER_EVERY", "2.5"}})
            .starts_with("JOBKIT_STRAGGLER_EVERY='2.5'"));
  CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_STRAGGLER_THRESHOLD", "1.5"}}) ==
        "JOBKIT_STRAGGLER_THRESHOLD='1.5': must be a number above 0 and at most 1");
  for (const char* bad : {"-0.001", "1ms", "inf", "nan", "4000", ""}) {
    INFO(bad);
    CHECK(refusal_of({{"JOBKIT_PROGRESS", "1"}, {"JOBKIT_STRAGGLER_RESOLUTION", bad}}) ==
          std::string("JOBKIT_STRAGGLER_RESOLUTION='") + bad +
              "': must be a number of seconds from 0 to 3600 (e.g. 0.001)");
  }
}

TEST_CASE("the learned bound: first-step allowance, then max(floor, factor x the longest interval)") {
  bound_learner l(quick());
  CHECK_FALSE(l.marked());
  REQUIRE(l.mark(mark_source::stop_agreement, 100.0, 0));
  // First step: nothing learned; the allowance holds.
  auto v = l.view(105.0);
  CHECK(v.phase == progress_phase::first_step);
  CHECK(v.bound == 10);
  CHECK_FALSE(v.hung());
  CHECK(l.view(110.5).hung());
  // A slow first interval (8 s, under the allowance) then quick steps of 0.2 s.
  REQUIRE(l.mark(mark_source::stop_agreement, 108.0, 0));
  CHECK(near(l.learned().longest_step, 8.0));
  // Within first_step seconds of the first mark: no hang before 110 (100 + 10).
  CHECK(l.view(109.9).phase == progress_phase::first_step);
  CHECK_FALSE(l.view(109.9).hung());
  // After: 5 x 8 s.
  CHECK(l.view(120).phase == progress_phase::step);
  CHECK(near(l.view(120).bound, 40));
  CHECK_FALSE(l.view(147).hung());
  CHECK(l.view(148.5).hung());
  CHECK(l.steps() == 2);

  // A short interval does not lower the bound; the floor holds when everything is quick.
  bound_learner q(quick());
  double t = 0;
  for (int i = 0; i < 10; ++i) q.mark(mark_source::explicit_call, t += 0.1, 0);
  CHECK(near(q.view(t + 20).bound, 1.0));  // max(floor 1, 5 x 0.1)
  CHECK(q.view(t + 20).phase == progress_phase::step);
  CHECK(q.view(t + 20).hung());
  CHECK(near(q.view(t + 20).activity, t));

  // A set bound overrides learning.
  auto set = quick();
  set.set_bound = 7;
  bound_learner s(set);
  s.mark(mark_source::collective, 0, 0);
  s.mark(mark_source::collective, 30, 0);
  CHECK(s.step_bound() == 7);
}

TEST_CASE("which boundaries count: the highest kind seen, and a new kind learns anew") {
  bound_learner l(quick());
  double t = 0;
  for (int i = 0; i < 5; ++i) REQUIRE(l.mark(mark_source::collective, t += 0.5, 0));
  CHECK(near(l.learned().longest_step, 0.5));
  REQUIRE(l.mark(mark_source::explicit_call, t += 2, 0));
  CHECK(l.learned().longest_step == 0);  // another kind: what the collectives measured is dropped
  CHECK_FALSE(l.mark(mark_source::collective, t += 0.1, 0));
  REQUIRE(l.mark(mark_source::stop_agreement, t += 1, 0));
  CHECK_FALSE(l.mark(mark_source::explicit_call, t += 0.1, 0));
  CHECK_FALSE(l.mark(mark_source::collective, t += 0.1, 0));
  REQUIRE(l.mark(mark_source::stop_agreement, t += 3, 0));
  CHECK(near(l.learned().longest_step, 3.2));
  CHECK(l.steps() == 8);
}

TEST_CASE("checkpoint phases have their own bound, and their time is not a step's") {
  auto settings = quick();
  settings.first_step = 1;
  bound_learner l(settings);
  double t = 0;
  for (int i = 0; i < 12; ++i) l.mark(mark_source::stop_agreement, t += 0.2, 0);
  CHECK(l.view(t + 0.5).phase == progress_phase::step);
  const double step_bound = l.step_bound();
  CHECK(near(step_bound, 1.0));
  // A save of 2.5 s (over the step bound, under the checkpoint floor of 3): no hang.
  l.save_begin(t += 0.1);
  auto v = l.view(t + 2.5);
  CHECK(v.phase == progress_phase::checkpoint);
  CHECK(v.bound == 3);
  CHECK_FALSE(v.hung());
  CHECK(l.view(t + 3.5).hung());
  CHECK_FALSE(l.mark(mark_source::collective, t + 1, 0));  // the commit's collectives
  l.save_end(t += 2.5);
  CHECK(near(l.learned().longest_checkpoint, 2.5));
  CHECK(near(l.checkpoint_bound(), 12.5));
  CHECK(l.view(t + 0.5).phase == progress_phase::step);
  CHECK(near(l.view(t + 0.5).idle, 0.5));  // counted from the save's end
  l.mark(mark_source::stop_agreement, t += 0.1, 0);
  CHECK(near(l.learned().longest_step, 0.2));  // 0.1 + 0.1, the save taken out
  // A restore: from latest() to the next boundary.
  l.restore_begin(t += 0.1);
  CHECK(l.view(t + 5).phase == progress_phase::checkpoint);
  CHECK_FALSE(l.view(t + 5).hung());
  l.mark(mark_source::stop_agreement, t += 4, 0);
  CHECK(near(l.learned().longest_checkpoint, 4.0));
  CHECK(near(l.learned().longest_step, 0.2));
  CHECK(l.view(t).phase == progress_phase::step);
}

TEST_CASE("a long step: its bound at least that, and it is not learned") {
  bound_learner l(quick());
  double t = 0;
  for (int i = 0; i < 12; ++i) l.mark(mark_source::stop_agreement, t += 0.2, 0);
  l.long_step(30);
  CHECK(l.view(t + 20).bound == 30);
  CHECK_FALSE(l.view(t + 20).hung());
  l.mark(mark_source::stop_agreement, t += 25, 0);
  CHECK(near(l.learned().longest_step, 0.2));
  CHECK(near(l.step_bound(), 1.0));
}

TEST_CASE("a carried bound: a restarted step does not learn from zero; merging takes the maximum") {
  bound_learner l(quick(), learned_progress{4.0, 2.0});
  l.mark(mark_source::stop_agreement, 0, 0);
  l.mark(mark_source::stop_agreement, 0.2, 0);
  CHECK(near(l.step_bound(), 20));
  CHECK(near(l.checkpoint_bound(), 10));
  l.merge({6.0, 1.0});
  CHECK(l.learned() == learned_progress{6.0, 2.0});

  const auto text = bound_file_text({1.5, 2.25}, 60, 300, 42);
  CHECK(text ==
        "{\"step_seconds\":1.500,\"checkpoint_seconds\":2.250,\"step_bound_seconds\":60.000,"
        "\"checkpoint_bound_seconds\":300.000,\"steps\":42}\n");
  CHECK(parse_bound_file(text) == learned_progress{1.5, 2.25});
  CHECK_FALSE(parse_bound_file(""));
  CHECK_FALSE(parse_bound_file("{\"step_seconds\":-1,\"checkpoint_seconds\":0}"));
  CHECK_FALSE(parse_bound_file("{\"step_seconds\":\"x\",\"checkpoint_seconds\":0}"));
  CHECK_FALSE(changed_materially({10, 5}, {10.5, 5}));
  CHECK(changed_materially({10, 5}, {11.5, 5}));
  CHECK(changed_materially({0, 0}, {0.1, 0}));
  CHECK_FALSE(changed_materially({0, 0}, {0, 0}));
}

TEST_CASE("straggler scores: the median of the ranks' medians over each rank's median") {
  bound_learner l(quick());
  CHECK_FALSE(l.median_compute());
  double t = 0;
  // Intervals of 1 s, waiting 0.25 s of each in collectives: 0.75 s of compute; the window keeps the last 4.
  l.mark(mark_source::stop_agreement, t, 0);
  for (int i = 0; i < 6; ++i) l.mark(mark_source::stop_agreement, t += 1, i < 2 ? 0.9 : 0.25);
  REQUIRE(l.median_compute());
  CHECK(near(*l.median_compute(), 0.75));

  const auto scores = straggler_scores({0.2, 0.21, 0.4, std::nullopt, 0.19, 0.2}, 0.001);
  REQUIRE(scores.size() == 6);
  CHECK(near(scores[0], 1.0));
  CHECK(near(scores[1], 0.2 / 0.21));
  CHECK(near(scores[2], 0.5));
  CHECK(scores[3] == 1.0);
  CHECK(near(scores[4], 0.2 / 0.19));
  CHECK(straggler_scores({}, 0.001).empty());
  CHECK(straggler_scores({0.0, 0.0}, 0) == std::vector<double>{1.0, 1.0});
  CHECK(straggler_scores({0.0, 0.0}, 0.001) == std::vector<double>{1.0, 1.0});
  // Compute times under the resolution are noise: a loop of microsecond stop agreements in which
  // one rank's median is 40 % longer scores no straggler; without the resolution it did.
  const std::vector<std::optional<double>> tight{5e-6, 5e-6, 7e-6, 5e-6};
  CHECK(straggler_scores(tight, 0.001) == std::vector<double>{1.0, 1.0, 1.0, 1.0});
  CHECK(near(straggler_scores(tight, 0)[2], 5.0 / 7.0));
  // Past it, the score is the plain ratio again; a rank partly under it counts as the resolution.
  const auto mixed = straggler_scores({0.0005, 0.002, 0.004}, 0.001);
  CHECK(near(mixed[0], 2.0));
  CHECK(near(mixed[1], 1.0));
  CHECK(near(mixed[2], 0.5));
}

TEST_CASE("waits the library does not run itself (torch's) come off the compute of the steps they overlap") {
  bound_learner l(quick());
  l.subtract_wait(0, 1);  // before the first mark: nothing to take it from
  l.mark(mark_source::stop_agreement, 10, 0);
  l.mark(mark_source::stop_agreement, 11, 0);  // [10, 11]: 1 s of compute
  l.mark(mark_source::stop_agreement, 12, 0);  // [11, 12]
  // Reported a poll late: a wait over the boundary at 11 (0.2 s in each step) and one of 0.5 s
  // in the step in progress, [12, now].
  l.subtract_wait(10.8, 11.2);
  l.subtract_wait(12.1, 12.6);
  l.subtract_wait(12.6, 12.6);                   // empty: nothing
  l.mark(mark_source::stop_agreement, 13, 0.1);  // [12, 13]: 1 - 0.1 (jobkit's) - 0.5 (torch's)
  l.mark(mark_source::stop_agreement, 14, 0);    // [13, 14]: 1
  REQUIRE(l.median_compute());
  // 0.8, 0.8, 0.4, 1.0: the median of four is the mean of the middle two.
  CHECK(near(*l.median_compute(), 0.8));
  // A wait longer than a step takes it to 0, never below; the window only.
  l.subtract_wait(12.5, 14);
  CHECK(near(*l.median_compute(), 0.4));  // 0.8, 0.8, 0.0, 0.0 -> (0 + 0.8) / 2
}

TEST_CASE("the process's tracker: one hang event per hang, naming the place; a carried bound read") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("jobkit-progress-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream carried(dir / "progress-bound.json");
    carried << bound_file_text({0.001, 0}, 1, 1, 3);
  }
  ::setenv("JOBKIT_RECOVERY_DIR", dir.c_str(), 1);
  ::setenv("JOBKIT_RECOVERY_ATTEMPT", "2", 1);
  ::setenv("JOBKIT_PROGRESS", "1", 1);
  ::setenv("JOBKIT_PROGRESS_FLOOR", "1", 1);
  ::setenv("JOBKIT_PROGRESS_FIRST_STEP", "1", 1);
  CHECK_THROWS_AS(jobkit::long_step(std::chrono::milliseconds(-1)), jobkit::error);
  for (int i = 0; i < 5; ++i) {
    jobkit::progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto events = [&] {
    std::ifstream in(dir / "events.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // A long step of 2.5 s: no hang before it is over, then one, reported once.
  jobkit::progress();
  jobkit::long_step(std::chrono::milliseconds(2500));
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  CHECK(count(events(), "\"event\":\"hang\"") == 0);
  std::string text;
  for (int i = 0; i < 50 && count(text, "\"event\":\"hang\"") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = events();
  }
  CHECK(count(text, "\"event\":\"first_step_done\"") == 1);
  REQUIRE(count(text, "\"event\":\"hang\"") == 1);
  CHECK(text.find("\"attempt\":2") != std::string::npos);
  CHECK(text.find("\"bound_seconds\":2.5") != std::string::npos);
  CHECK(text.find("\"phase\":\"step\"") != std::string::npos);
  CHECK(text.find("\"in_call\":false") != std::string::npos);
  CHECK(text.find("\"where\":\"outside any jobkit call\"") != std::string::npos);
  CHECK(text.find("\"steps\":6") != std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK(count(events(), "\"event\":\"hang\"") == 1);  // once per hang, not every second
  // Progress again (the long step is not learned), then a second hang past max(1 s floor, 5 x 20 ms).
  jobkit::progress();
  for (int i = 0; i < 50 && count(text, "\"event\":\"hang\"") < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = events();
  }
  CHECK(count(text, "\"event\":\"hang\"") == 2);
  CHECK(text.find("\"bound_seconds\":1.0") != std::string::npos);
  // The learned bound, carried: rank 0 rewrote it (intervals of about 20 ms, above the 1 ms carried).
  std::ifstream bound(dir / "progress-bound.json");
  const std::string saved((std::istreambuf_iterator<char>(bound)), std::istreambuf_iterator<char>());
  const auto learned = parse_bound_file(saved);
  REQUIRE(learned);
  CHECK(learned->longest_step > 0.015);
  CHECK(learned->longest_step < 1);
  CHECK(progress_last_scores().empty());

  // torch's collectives, as jobkit.torch's watch hands them over: the hang names the oldest that
  // began after the last progress (one pending from before it, a poll late, is not the rank's place).
  const auto system_now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const auto stale_ns = system_now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  jobkit::long_step(std::chrono::milliseconds(1));  // the hung interval ending now is not learned
  jobkit::progress();
  progress_torch_collectives({{"torch gloo:all_reduce", "train.py:7", stale_ns}});
  for (int i = 0; i < 50 && count(text, "\"event\":\"hang\"") < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = events();
  }
  REQUIRE(count(text, "\"event\":\"hang\"") == 3);
  CHECK(count(text, "\"where\":\"outside any jobkit call\"") == 3);
  jobkit::long_step(std::chrono::milliseconds(1));
  jobkit::progress();
  progress_torch_collectives(
      {{"torch gloo:recv", "pipeline.py:3", stale_ns}, {"torch gloo:all_reduce", "train.py:7", system_now_ns()}});
  for (int i = 0; i < 50 && count(text, "\"event\":\"hang\"") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = events();
  }
  REQUIRE(count(text, "\"event\":\"hang\"") == 4);
  CHECK(text.find(R"("in_call":true,"call":"torch gloo:all_reduce","site":"train.py:7","where":"in torch )"
                  R"(gloo:all_reduce at train.py:7 for )") != std::string::npos);
  CHECK(text.find(R"x( s (torch's flight recorder)")x") != std::string::npos);
  progress_torch_collectives({});

  // An exchange's shares: every rank keeps its own score in its `jobkit where` record (made at
  // its first recorded call, in a Slurm step); rank 0 also keeps all and records the event.
  ::setenv("SLURM_JOB_ID", "990002", 1);
  ::setenv("SLURM_STEP_ID", "0", 1);
  { const jobkit::where::call_scope call({.call = "all_gather", .site = "t.cpp:1", .rank = 2, .group_size = 4}); }
  REQUIRE(jobkit::where::read_own_record());
  CHECK_FALSE(jobkit::where::read_own_record()->score);
  const std::vector<progress_share> shares{
      {0.2, 0.3, 0, "c1"}, {0.2, 0.3, 0, "c1"}, {0.4, 0.5, 0, "c2"}, {-1, 0, 0, "c2"}};
  progress_take_shares(shares, 2, 40);
  const auto mine = jobkit::where::read_own_record();
  REQUIRE(mine);
  REQUIRE(mine->score);
  CHECK(near(*mine->score, 0.5));
  CHECK(near(mine->score_threshold, 0.75));
  CHECK(mine->score_agreement == 40);
  CHECK(progress_last_scores().empty());  // not rank 0
  progress_take_shares(shares, 0, 60);
  CHECK(near(*jobkit::where::read_own_record()->score, 1.0));
  CHECK(jobkit::where::read_own_record()->score_agreement == 60);
  CHECK(progress_last_scores().size() == 4);
  CHECK(count(events(), "\"event\":\"straggler\"") == 1);
  CHECK(events().find(R"("stragglers":[{"rank":2,"host":"c2","score":0.500}],"scores":[1.000,1.000,0.500,1.000])") !=
        std::string::npos);
  fs::remove_all(dir);
}
