#!/usr/bin/env bash
# A node lost during a 3-node Slurm job: tests/hosts/slurm_node_lost.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/slurm_node_lost.sh"
