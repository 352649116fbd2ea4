#!/usr/bin/env bash
# A host cut off (link down, processes alive) and brought back: tests/hosts/fault_host_cut.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/fault_host_cut.sh"
