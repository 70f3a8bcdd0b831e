#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace jobkit::detail {

/// A release number such as 5.0.8 or 25.11 (patch unknown: -1).
struct release {
  int major = 0;
  int minor = 0;
  int patch = -1;
  auto operator<=>(const release&) const = default;
};

/// The first "A.B" or "A.B.C" in a text: "OpenPMIx 4.2.2rc2, repo rev: ..." gives 4.2.2,
/// "slurm-wlm 22.05.8" gives 22.5.8; nullopt when there is none.
std::optional<release> parse_release(std::string_view text);

/// What is known of the PMIx and Slurm a process runs under. Every field is text as found, with
/// where it came from; parse_release reads the numbers.
struct launcher_versions {
  std::string pmix_client;                 ///< pmix_client_version(): the libpmix loaded, or why none
  std::optional<std::string> pmix_server;  ///< PMIX_VERSION, which a PMIx server sets for its clients
  std::optional<std::string> slurm;        ///< e.g. "22.05.8" or "24.11" (patch unknown)
  std::string slurm_origin;                ///< how slurm was found, or why not
  std::optional<std::string> mca_gds;      ///< PMIX_MCA_gds, a user's choice of PMIx store
  std::optional<std::string> gds_module;   ///< PMIX_GDS_MODULE, the stores the server offers
};

/// The PMIx fields of launcher_versions from this process and its environment (no PMIx call
/// other than PMIx_Get_version, which needs no server); slurm is left for the caller.
launcher_versions pmix_versions(const environment& env);

/// The known PMIx_Init hang, its fix and its workaround, in one sentence (for messages).
std::string_view known_init_hang();

/// One finding about a combination of versions: a warning (a known failure) or a note.
struct version_advice {
  bool warning = false;
  std::string text;
};

/// The known-bad combinations and noteworthy settings among `versions`: Slurm 24.11.x, 25.05.x
/// and 25.11.0-25.11.1 with a PMIx server >= 5.0.8 (PMIx_Init hangs); PMIx 5.0.0 with 5.0.1 without
/// PMIX_MCA_gds=hash; client and server of different major versions; a PMIx store chosen through
/// PMIX_MCA_gds. Pure: the same versions give the same advice.
std::vector<version_advice> advise(const launcher_versions& versions);

}  // namespace jobkit::detail
