#!/usr/bin/env bash
# attnsweep submit --nodes 3 on a 3-node Slurm made of network namespaces: tests/hosts/slurm_nodes.sh.
exec bash "$(cd "$(dirname "$0")" && pwd)/../hosts/slurm_nodes.sh"
