#!/usr/bin/env bash
# A run directory not shared by every host: tests/hosts/shared_dir.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/shared_dir.sh"
