#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jobkit/identity.hpp"

namespace jobkit::detail {

/// "<job>.<step>" of this identity ("<job>" outside a Slurm step), with every character other
/// than letters, digits, '.', '_' and '-' replaced by '_' (a PMIx namespace may hold '@' or
/// '/'). Without a job id (no launcher): "pid<pid>", unique among running processes.
std::string job_step_tag(const identity& id, int pid);

/// The name of a workspace directory: "jobkit-<purpose>-<job_step_tag>", plus "-g<16 hex
/// digits>" (a hash of the members' world ranks) unless the members are the whole world.
std::string workspace_directory_name(std::string_view purpose, const identity& id, const std::vector<int>& world_ranks,
                                     int pid);

/// The POSIX shared memory segment of `world_rank` in a node-local gather:
/// "/jobkit-<job_step_tag>-<world_rank>".
std::string segment_name(const identity& id, int world_rank, int pid);

}  // namespace jobkit::detail
