#!/usr/bin/env bash
# Point this job's TRITON_CACHE_DIR at a Triton cache chosen by trust (docs/ci.md, "The Triton cache").
#
#   triton-cache.sh setup GPU [TAG]   writes TRITON_CACHE_DIR and PERFCI_CACHE_TRUST to $GITHUB_ENV
#   triton-cache.sh cleanup           removes this job's private copy (PR runs only)
#
# Main/baseline runs (a push or a dispatch on the default branch) use ROOT/GPU/main and keep it between
# jobs, so the autotune picks made when the baseline was measured are the ones timed later. Every
# other run (pull requests, dispatches on other branches) gets a private copy of it,
# ROOT/GPU/pr/<run>-<attempt>-TAG, deleted when the job ends: a PR reads main's picks but nothing a PR
# compiles or autotunes is ever read by a main or baseline run.
# ROOT: $PERFCI_CACHE_ROOT if the runner sets it, else $RUNNER_TOOL_CACHE/perfci-triton.
# Needs GITHUB_EVENT_NAME, GITHUB_REF, GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT, GITHUB_ENV (set by the runner)
# and DEFAULT_BRANCH (the step passes github.event.repository.default_branch).
set -euo pipefail

die() { echo "::error::triton-cache.sh: $*" >&2; exit 2; }
name_ok() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; }

case "${1:-}" in
setup)
  gpu="${2:-}"; tag="${3:-0}"
  name_ok "$gpu" || die "bad GPU label '${gpu}'"
  name_ok "$tag" || die "bad tag '${tag}'"
  : "${GITHUB_ENV:?}" "${GITHUB_EVENT_NAME:?}" "${GITHUB_REF:?}" "${DEFAULT_BRANCH:?}"
  if [[ -n "${PERFCI_CACHE_ROOT:-}" ]]; then
    root="$PERFCI_CACHE_ROOT/$gpu"
  else
    root="${RUNNER_TOOL_CACHE:?RUNNER_TOOL_CACHE is not set}/perfci-triton/$gpu"
  fi
  if [[ "$GITHUB_EVENT_NAME" != pull_request* && "$GITHUB_REF" == "refs/heads/$DEFAULT_BRANCH" ]]; then
    trust=main
    dir="$root/main"
    mkdir -p "$dir"
  else
    trust=pr
    dir="$root/pr/${GITHUB_RUN_ID:?}-${GITHUB_RUN_ATTEMPT:?}-$tag"
    mkdir -p "$root/pr"
    # copies left by jobs that died before their cleanup step (a job is capped well below 12 h)
    find "$root/pr" -mindepth 1 -maxdepth 1 -type d -mmin +720 -exec rm -rf {} + || true
    rm -rf "$dir"
    mkdir -p "$dir"
    if [[ -d "$root/main" ]]; then
      cp -a "$root/main/." "$dir/"
    fi
    touch "$dir"  # cp -a gave it main's old mtime; the sweep above goes by it
  fi
  echo "TRITON_CACHE_DIR=$dir" >> "$GITHUB_ENV"
  echo "PERFCI_CACHE_TRUST=$trust" >> "$GITHUB_ENV"
  echo "triton-cache.sh: $trust cache $dir"
  ;;
cleanup)
  if [[ "${PERFCI_CACHE_TRUST:-}" == pr && "${TRITON_CACHE_DIR:-}" == */pr/* ]]; then
    rm -rf -- "$TRITON_CACHE_DIR"
    echo "triton-cache.sh: removed $TRITON_CACHE_DIR"
  fi
  ;;
*)
  die "usage: triton-cache.sh setup GPU [TAG] | cleanup"
  ;;
esac
