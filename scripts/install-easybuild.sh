#!/usr/bin/env bash
# Installs what the easybuild test (tests/easybuild) needs, as root, on Debian 12: Lmod from Debian
# and EasyBuild from PyPI (pinned) in a venv of its own, /opt/jobkit-easybuild. Kept apart from
# scripts/install-deps.sh, whose text names the Debian 13 root (scripts/debian13.sh): the test runs
# on Debian 12 only. Without them the test skips, which a CI run counts as a failure.
set -euo pipefail
easybuild_version=5.4.1
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ $codename == bookworm ]] || { echo "install-easybuild: the easybuild test runs on Debian 12 only"; exit 0; }
((EUID == 0)) || { echo "install-easybuild: run as root" >&2; exit 1; }
if ! dpkg-query -W -f='${Status}' lmod 2>/dev/null | grep -q 'install ok installed'; then
  echo "install-easybuild: installing lmod"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lmod >/dev/null
fi
if [[ ! -x /opt/jobkit-easybuild/bin/eb ]]; then
  echo "install-easybuild: installing EasyBuild $easybuild_version in /opt/jobkit-easybuild"
  rm -rf /opt/jobkit-easybuild
  /usr/bin/python3 -m venv /opt/jobkit-easybuild
  /opt/jobkit-easybuild/bin/pip install -q "easybuild==$easybuild_version" ||
    { rm -rf /opt/jobkit-easybuild; exit 1; }
fi
