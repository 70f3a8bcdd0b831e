#include "pmix/versions.hpp"

#include <fmt/format.h>

#include "core/parse.hpp"
#include "pmix/library.hpp"

namespace jobkit::detail {
namespace {

bool digit(char ch) { return ch >= '0' && ch <= '9'; }

std::string shown(const release& r) {
  return r.patch < 0 ? fmt::format("{}.{}", r.major, r.minor) : fmt::format("{}.{}.{}", r.major, r.minor, r.patch);
}

}  // namespace

std::optional<release> parse_release(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!digit(text[i]) || (i > 0 && digit(text[i - 1]))) continue;
    std::string_view rest = text.substr(i);
    release found;
    const auto major = take_decimal(rest);
    if (!major || rest.size() < 2 || rest.front() != '.' || !digit(rest[1])) continue;
    rest.remove_prefix(1);
    const auto minor = take_decimal(rest);
    if (!minor) continue;
    found.major = *major;
    found.minor = *minor;
    if (rest.size() >= 2 && rest.front() == '.' && digit(rest[1])) {
      rest.remove_prefix(1);
      if (const auto patch = take_decimal(rest)) found.patch = *patch;
    }
    return found;
  }
  return std::nullopt;
}

launcher_versions pmix_versions(const environment& env) {
  launcher_versions found;
  found.pmix_client = pmix_client_version();
  found.pmix_server = env.get("PMIX_VERSION");
  found.mca_gds = env.get("PMIX_MCA_gds");
  found.gds_module = env.get("PMIX_GDS_MODULE");
  found.slurm_origin = "not looked for";
  return found;
}

std::string_view known_init_hang() {
  return "Slurm 24.11.x, 25.05.x and 25.11.0-25.11.1 built against OpenPMIx 5.0.8 or later never let a "
         "client's PMIx_Init finish (openpmix issue 3645; fixed in Slurm 25.11.2); workaround: a Slurm "
         "built against PMIx 5.0.7 or earlier, or Slurm 25.11.2 or later";
}

std::vector<version_advice> advise(const launcher_versions& versions) {
  std::vector<version_advice> advice;
  const auto client = parse_release(versions.pmix_client);
  const auto server = parse_release(versions.pmix_server.value_or(""));
  const auto slurm = parse_release(versions.slurm.value_or(""));
  const bool hash_store = versions.mca_gds && *versions.mca_gds == "hash";

  if (slurm && server && *server >= release{5, 0, 8}) {
    const bool series = (slurm->major == 24 && slurm->minor == 11) || (slurm->major == 25 && slurm->minor == 5);
    const bool early_25_11 = slurm->major == 25 && slurm->minor == 11 && slurm->patch < 2;
    if (series || early_25_11) {
      advice.push_back({true, fmt::format("Slurm {} with PMIx server {}: PMIx_Init hangs. {}{}", *versions.slurm,
                                          shown(*server), known_init_hang(),
                                          early_25_11 && slurm->patch < 0
                                              ? " (only the Slurm series is known here: 25.11.2 and later are fixed)"
                                              : "")});
    }
  }
  if (client && server && client->major == 5 && server->major == 5 && client->minor == 0 && server->minor == 0 &&
      ((client->patch == 0 && server->patch == 1) || (client->patch == 1 && server->patch == 0)) && !hash_store) {
    advice.push_back({true, fmt::format("PMIx client {} with server {}: these two releases disagree on the "
                                        "shared-memory store's key indices (OpenPMIx 5.0.1 release notes); set "
                                        "PMIX_MCA_gds=hash",
                                        shown(*client), shown(*server))});
  }
  if (client && server && client->major != server->major) {
    const release oldest_compatible{2, 1, 1};
    if (*client < oldest_compatible || *server < oldest_compatible) {
      advice.push_back({true, fmt::format("PMIx client {} with server {}: OpenPMIx guarantees cross-version "
                                          "compatibility only from 2.1.1 on",
                                          shown(*client), shown(*server))});
    } else {
      advice.push_back({false, fmt::format("PMIx client {} with server {}: wire-compatible (OpenPMIx guarantees it "
                                           "from 2.1.1 on), but a feature works only where both support it",
                                           shown(*client), shown(*server))});
    }
  }
  if (versions.mca_gds) {
    advice.push_back(
        {false,
         fmt::format("PMIX_MCA_gds={} is in effect: it chooses the PMIx store{}", *versions.mca_gds,
                     hash_store ? " (hash: no shared-memory store, the workaround for PMIx 5's shmem bugs)" : "")});
  }
  return advice;
}

}  // namespace jobkit::detail
