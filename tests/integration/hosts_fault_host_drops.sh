#!/usr/bin/env bash
# Two hosts whose links silently drop every packet (up, no reset), one of them with a rank
# waiting for work, then pass them again: tests/hosts/fault_host_frozen.sh, HOST_FAULT=drop.
HOST_FAULT=drop exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/fault_host_frozen.sh"
