#!/usr/bin/env bash
# Each node's ranks share out its GPUs by local rank (faked GPU count): tests/hosts/gpu_binding.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/gpu_binding.sh"
