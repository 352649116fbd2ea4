#!/usr/bin/env bash
# The coordinator's host killed under mpirun over 3 hosts: tests/hosts/fault_coordinator_killed.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/fault_coordinator_killed.sh"
