# The replay scripts' shared arguments, sourced by each findings/<folder>/run.sh from the repository root:
#   source findings/replay_args.sh "$@"
# reads `[--quick] [OUT]` and sets quick (0 or 1), out (OUT, default outputs/findings/<folder>) and data (the real
# data, $DATA_DIR or ../shared/data), and exports the offline settings every replay runs with. Anything else is
# refused with one line naming the usage, before anything is written.
_folder="$(basename "$(dirname "${BASH_SOURCE[1]}")")"
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
if [ $# -gt 1 ] || [[ "${1:-}" == -* ]]; then
  echo "error: bash findings/$_folder/run.sh takes [--quick] [OUT], not '$*'" >&2
  exit 2
fi
out="${1:-outputs/findings/$_folder}"
data="${DATA_DIR:-../shared/data}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
