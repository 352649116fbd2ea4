#!/usr/bin/env bash
# A whole non-coordinator host killed under mpirun over 3 hosts: tests/hosts/fault_host_killed.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/fault_host_killed.sh"
