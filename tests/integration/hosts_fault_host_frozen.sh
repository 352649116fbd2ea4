#!/usr/bin/env bash
# Two hosts frozen (SIGSTOP), one of them with a rank waiting for work: tests/hosts/fault_host_frozen.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/fault_host_frozen.sh"
