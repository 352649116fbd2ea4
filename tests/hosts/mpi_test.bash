# The preamble of the multi-host MPI tests (sourced by tests/hosts/*.sh): the test
# library, the host harness and the grids; mpi_hosts_up N checks mpirun and brings up N hosts.
HOSTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib.bash
source "$HOSTS_DIR/../integration/lib.bash"
# shellcheck source=hosts.bash
source "$HOSTS_DIR/hosts.bash"
# shellcheck source=grids.bash
source "$HOSTS_DIR/grids.bash"
mpi_hosts_up() {
  command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
  hosts_up "$1"
}
