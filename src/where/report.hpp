#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "where/record.hpp"

namespace jobkit::where {

/// A Python rank's stack from faulthandler's dump (all threads): the thread the signal interrupted
/// ("Current thread"), else the first, innermost frame first: "load_shard data.py:12 <- train_step
/// train.py:27 <- <module> train.py:40"; at most 6 frames. nullopt when the dump holds no frame.
std::optional<std::string> python_frames(std::string_view dump);

/// One rank's answer, as an agent writes it (one line) and the front end reads it.
struct rank_answer {
  int rank = 0;
  std::string host;
  long seconds = -1;   // in the call, for this long; -1: not in a call
  int group_size = 0;  // the call's group; 0: not in a call
  std::string text;    // "in barrier at train.py:31", "not in jobkit: load_shard data.py:12 <- ..."
};

/// What a rank is doing: its record (a call in progress, or the last that ended), else its Python
/// stack, else /proc's state, with why no stack was asked for where one could have been
/// (no_stack: proc.hpp's plan_stack). now_ns: CLOCK_REALTIME.
rank_answer describe(int rank, std::string host, const std::optional<record_view>& record,
                     const std::optional<std::string>& stack, const std::string& state, std::int64_t now_ns,
                     std::string_view no_stack = {});

/// "RANK\tHOST\tSECONDS\tGROUP_SIZE\tTEXT\n"; tabs and newlines in the text become blanks.
std::string format_answer(const rank_answer& answer);
std::optional<rank_answer> parse_answer(std::string_view line);

/// A rank's straggler score from its record, as an agent writes it (one line; "" when the record
/// has none): "#score RANK HOST SCORE THRESHOLD AGREEMENT".
std::string format_score(int rank, std::string_view host, const record_view& record);

/// The agents' output folded: one line per distinct answer, under its ranks, in the order of their
/// first rank: "[rank: 0-4,6] in barrier at train.py:31 for 41-42 s, waiting for rank 5 (c2)". A
/// world call names the ranks not in it. Each of nodes whose agent said nothing ("#node HOST N")
/// is named as not answering. Where ranks have straggler scores (progress tracking's exchange), a
/// block follows: one line per node, in the order of its first rank, each rank with its score, a
/// straggler marked ("  c3: rank 4 0.48 (straggler), rank 5 1.00"); past 64 scored ranks, one line
/// per straggler ("  rank 4 (c3) 0.48 (straggler)") and one for the others' range.
std::string fold_report(std::string_view agents_output, const std::vector<std::string>& nodes);

}  // namespace jobkit::where
