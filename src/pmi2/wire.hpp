#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// What PMI-2 (Slurm's libpmi2, pmi2.h) allows: keys of at most 63 characters and values of at
/// most 1023 (PMI2_MAX_KEYLEN and PMI2_MAX_VALLEN count the terminating NUL), as text.
inline constexpr std::size_t pmi2_max_key_chars = 63;
inline constexpr std::size_t pmi2_max_value_chars = 1023;
/// PMI_process_mapping is read into a buffer of PMI2_MAX_ATTRVALUE (1024) bytes.
inline constexpr std::size_t pmi2_max_mapping_chars = 1023;

/// PMI_process_mapping, the MPICH "vector" form that Slurm's mpi/pmi2 serves:
/// "(vector,(S,N,K),(S,N,K),...)": nodes S to S+N-1 each hold the next K ranks, in rank order;
/// the triples together hold every rank exactly once. Returns the node index of each rank.
/// Hostile input: bounded by pmi2_max_mapping_chars, every number checked, node indices dense from
/// 0. (MPICH also repeats a mapping that covers fewer ranks than the job; Slurm never serves one,
/// and jobkit refuses it rather than guess.)
/// @throws jobkit::error (pmix) naming the text and what is wrong with it
std::vector<int> parse_process_mapping(std::string_view text, int world_size);

/// This rank's place in a node_of_rank vector (parse_process_mapping's result).
struct node_place {
  int node_rank = 0;
  int local_rank = 0;  ///< how many ranks below this one share its node
  int local_world_size = 1;
  int num_nodes = 1;
};
node_place place_of(const std::vector<int>& node_of_rank, int rank);

/// The PMI-2 key of part `part` of `key` put by `rank`: Slurm's PMI-2 key space is shared by the
/// whole job (the rank given to PMI2_KVS_Get is not part of the key), so the rank is in the name.
/// @throws jobkit::error (invalid_argument) when the key has characters other than letters,
/// digits and "._-:#", or is too long for PMI-2
std::string pmi2_key(std::string_view key, int rank, std::size_t part);

/// The rendezvous carries bytes; PMI-2 carries text values of bounded length. A value becomes
/// parts of lowercase hex, the first one prefixed by the number of parts and ':' ("2:0a1b...").
/// At most pmi2_max_parts parts (about 7 MiB).
inline constexpr std::size_t pmi2_part_hex_chars = 1000;
inline constexpr std::size_t pmi2_max_parts = 16384;
std::vector<std::string> encode_pmi2_value(std::span<const std::byte> bytes);
/// The number of parts the first part announces.
/// @throws jobkit::error (pmix) when it is not "N:" with 1 <= N <= pmi2_max_parts
std::size_t pmi2_value_parts(std::string_view first);
/// Appends the bytes of one part (the first one without its prefix: pass the whole first part
/// with first = true). @throws jobkit::error (pmix) on anything but an even number of hex digits
void decode_pmi2_part(std::string_view part, bool first, std::vector<std::byte>& out);

}  // namespace jobkit::detail
