#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages matcha needs, only those missing. Idempotent: a second run installs nothing.
# CUDA is not a Debian package here: the CUDA 13.0 toolkit in /usr/local/cuda is used when present, and the CPU
# build works without it.
set -euo pipefail

packages=(
  cmake g++ make                 # toolchain
  libeigen3-dev                  # small linear algebra
  libtbb-dev                     # parallel loops and sorts (tree)
  libhdf5-dev hdf5-tools         # snapshots; h5dump for the snapshot layout test
  libcli11-dev                   # command line
  libfftw3-dev                   # particle mesh (mesh/): FFTW3 in double, with its threads library
  libboost-dev                   # cosmology/: Boost.Math quadrature and interpolation, Boost.Odeint (header-only)
  nlohmann-json3-dev             # JSON summaries (--json)
  libcairo2-dev pkg-config fonts-dejavu-core  # matcha render: PNG, text and drawing (found with pkg-config)
  libgtest-dev libgmock-dev      # tests
  libbenchmark-dev               # bench/
  libopenmpi-dev openmpi-bin     # parallel/: the distributed solver (MATCHA_MPI), mpirun for its tests
  libfftw3-mpi-dev               # parallel/: the particle mesh in slabs over the ranks (FFTW's MPI interface)
  python3-numpy python3-matplotlib python3-h5py  # scripts/*.py, run with /usr/bin/python3
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all Debian packages present"
  exit 0
fi

apt_line="apt-get install -y --no-install-recommends ${missing[*]}"
echo "setup: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "setup: not root and no passwordless sudo; please run as root:" >&2
    echo "  apt-get update && $apt_line" >&2
    exit 1
  fi
else
  SUDO=
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: apt-get not found (not a Debian system?); install the equivalent of: ${missing[*]}" >&2
  exit 1
fi
echo "setup: running: apt-get update && $apt_line"
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -qq && $SUDO $apt_line; }; then
  echo "setup: installing failed; run by hand: apt-get update && $apt_line" >&2
  exit 1
fi
echo "setup: done"
