#!/usr/bin/env bash
# mpirun over 3 hosts made of network namespaces: tests/hosts/mpi.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/mpi.sh"
