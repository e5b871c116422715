# Sourced by the scripts and by the test wrappers.
# - Where LibTorch 2.11 lives: a virtual environment outside the checkout, keyed by
#   the torch version (scripts/setup.sh makes it). Override with SLUICE_PREFIX.
# - Lets Open MPI run as root (containers, CI).
SLUICE_TORCH_VERSION=2.11
SLUICE_TORCH_ENV=${SLUICE_TORCH_ENV:-${SLUICE_PREFIX:-/opt/sluice}/torch-${SLUICE_TORCH_VERSION}}
SLUICE_PYTHON="$SLUICE_TORCH_ENV/bin/python"
export SLUICE_TORCH_VERSION SLUICE_TORCH_ENV SLUICE_PYTHON
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
