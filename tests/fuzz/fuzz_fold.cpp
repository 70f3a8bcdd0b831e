// `jobkit fold`'s engine on any bytes: the first byte picks the step's size, --numbers, whether
// the size is srun's own (labels exactly its width) and where the stream is cut in two reads (the
// second a gap later); the second byte the held limit (0: the default); then the end of the stream.
// Nothing may be lost or invented: read back ("[rank: SET] text" gives text to each rank of SET),
// the output holds every rank's lines in its order, and every line without a label, in order;
// never more than the held limit is held after a read, nothing stays held at the end. The first
// line, split at blanks, is also read as srun's options: a count within 2^24, or a jobkit::error.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "finding.hpp"
#include "fold/folder.hpp"
#include "fold/labels.hpp"
#include "fold/srun_options.hpp"
#include "jobkit/error.hpp"

namespace {

using by_rank = std::map<int, std::vector<std::string>>;

/// Each line read back as one rank's (a "[rank: SET] " prefix, SET as fold writes it) or as a
/// line of none (-1).
void read_back(std::string_view line, by_rank& lines) {
  constexpr std::string_view open = "[rank: ";
  const auto close = line.find("] ");
  if (line.substr(0, open.size()) == open && close != std::string_view::npos) {
    const auto set = line.substr(open.size(), close - open.size());
    std::vector<std::pair<long, long>> ranges;
    bool ok = !set.empty() && set.find_first_not_of("0123456789,-") == std::string_view::npos;
    for (std::size_t start = 0; ok && start <= set.size();) {
      auto end = set.find(',', start);
      if (end == std::string_view::npos) end = set.size();
      const std::string part(set.substr(start, end - start));
      const auto dash = part.find('-');
      const auto first_digits = dash == std::string::npos ? part.size() : dash;
      const auto last_digits = dash == std::string::npos ? part.size() : part.size() - dash - 1;
      ok = first_digits > 0 && first_digits < 9 && last_digits > 0 && last_digits < 9 &&
           (dash == std::string::npos || part.find('-', dash + 1) == std::string::npos);
      if (ok)
        ranges.emplace_back(std::stol(part),
                            dash == std::string::npos ? std::stol(part) : std::stol(part.substr(dash + 1)));
      ok = ok && ranges.back().first <= ranges.back().second && ranges.back().second - ranges.back().first < 65536;
      start = end + 1;
    }
    if (ok) {
      for (const auto& [first, last] : ranges) {
        for (long r = first; r <= last; ++r) lines[static_cast<int>(r)].emplace_back(line.substr(close + 2));
      }
      return;
    }
  }
  lines[-1].emplace_back(line);
}

/// srun's options: a count within most_tasks, or the error of one past it.
void srun_options(std::string_view line) {
  std::vector<std::string_view> args;
  for (std::size_t start = 0; start <= line.size();) {
    auto end = line.find(' ', start);
    if (end == std::string_view::npos) end = line.size();
    if (end > start) args.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  try {
    const auto tasks = jobkit::fold::srun_task_count(args);
    if (tasks && (tasks->count < 1 || tasks->count > jobkit::fold::most_tasks))
      finding("srun's task count out of bounds");
  } catch (const jobkit::error& e) {
    if (e.code() != jobkit::errc::invalid_argument) finding("srun's options refused as something else");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
  srun_options(input.substr(0, input.find('\n')));
  jobkit::fold::options options;
  options.ranks = data[0] % 8;
  options.numbers = (data[0] & 8) != 0;
  if ((data[0] & 16) != 0) options.srun_tasks = options.ranks;
  if (data[1] != 0) options.held_limit = std::size_t{data[1]} * 64;
  const std::size_t cut = input.size() * (data[0] >> 5) / 8;
  jobkit::fold::folder folder(options);
  const jobkit::fold::clock::time_point t0{};
  folder.add(input.substr(0, cut), t0);
  if (folder.held_bytes() > options.held_limit) finding("more than the held limit held after a read");
  folder.add(input.substr(cut), t0 + options.gap);
  if (folder.held_bytes() > options.held_limit) finding("more than the held limit held after a read");
  folder.finish(t0 + options.gap);
  if (folder.held_bytes() != 0) finding("bytes held after the end");
  const auto& output = folder.output();
  if (!output.empty() && output.back() != '\n') finding("the output ends in the middle of a line");
  if (options.numbers) return 0;  // numbers folded are rewritten as ranges
  // What fold was given, each line written as fold writes one rank's line, read back the same way.
  by_rank expected;
  by_rank got;
  for (std::size_t start = 0; start < input.size();) {
    auto end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const auto line = input.substr(start, end - start);
    if (const auto labelled = jobkit::fold::parse_label(line, options.srun_tasks)) {
      // srun's label names a rank below srun's tasks (jobkit's own prefix is read as it is).
      const bool srun_label = line.substr(0, 7) != "[rank: ";
      if (srun_label && options.srun_tasks > 0 && labelled->rank >= options.srun_tasks) {
        finding("srun's label past srun's tasks");
      }
      read_back("[rank: " + std::to_string(labelled->rank) + "] " + std::string(labelled->text), expected);
    } else {
      // A line without a label that reads back as ranks' ("[rank: 0-4] x", fold's own output fed
      // to it again) belongs to no rank: its place among theirs is not theirs to keep.
      const auto before = expected.find(-1) == expected.end() ? 0 : expected[-1].size();
      read_back(line, expected);
      if (expected[-1].size() == before) return 0;
    }
    start = end + 1;
  }
  for (std::size_t start = 0; start < output.size();) {
    const auto end = output.find('\n', start);
    read_back(std::string_view(output).substr(start, end - start), got);
    start = end + 1;
  }
  // Past the held limit, fold says so once, in the output: a line of none that was not given.
  const std::string notice = "jobkit fold: more than " + std::to_string(options.held_limit) +
                             " bytes held: the oldest blocks are written unfolded until half of that is held";
  auto& loose = got[-1];
  const auto given = expected.count(-1) == 0 ? 0 : std::count(expected[-1].begin(), expected[-1].end(), notice);
  if (std::count(loose.begin(), loose.end(), notice) > given)
    loose.erase(std::find(loose.begin(), loose.end(), notice));
  if (loose.empty()) got.erase(-1);
  if (got != expected) finding("the output, read back, is not what each rank wrote");
  return 0;
}
