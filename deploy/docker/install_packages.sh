#!/bin/sh
# Runs inside an image build (RUN): installs the packages named in LIST (the
# Debian packages holding the libraries the binaries load, see
# runtime_packages.sh), then purges what apt added beyond them: packages that
# Debian's dependencies pull in but no binary of the image loads (for the
# worker, Mesa and LLVM through OpenCV's GUI libraries, about 250 MiB). dpkg
# then records those dependencies as unmet; the image is a runtime, not a
# base to install more packages into.
#   install_packages.sh LIST
set -eu

list="$1"
export LC_ALL=C DEBIAN_FRONTEND=noninteractive
dpkg-query -W -f '${Package}\n' | sort >/tmp/packages-before
apt-get update -qq
xargs -a "$list" apt-get install -y -qq --no-install-recommends >/dev/null
dpkg-query -W -f '${Package}\n' | sort | comm -23 - /tmp/packages-before | comm -23 - "$list" >/tmp/packages-unneeded
if [ -s /tmp/packages-unneeded ]; then
  echo "install_packages.sh: purging $(wc -l </tmp/packages-unneeded) packages no binary loads: $(tr '\n' ' ' </tmp/packages-unneeded)"
  xargs -a /tmp/packages-unneeded dpkg --purge --force-depends >/dev/null
fi
rm -rf /var/lib/apt/lists/* /tmp/packages-before /tmp/packages-unneeded
