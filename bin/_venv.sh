# shellcheck shell=bash
# Shared bootstrap for the bin/ entry points; source it, then call `hm_venv [EXTRAS]`.
#
# Makes sure the repo's .venv exists (created with the first Python >= 3.11 found) and
# holds hm installed editable with EXTRAS plus any in $HM_EXTRAS (e.g. HM_EXTRAS=tpu),
# at the versions pinned in constraints.txt (the ones the suite passes on).
# pip runs only when pyproject.toml, constraints.txt, the extras or the repo's location
# changed since the last install, so a warm start costs nothing. Sets HM_ROOT and HM_PYTHON.

hm_find_python() {
  local candidate
  for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: hm needs Python >= 3.11; none of python3, python3.13, python3.12, python3.11 is" >&2
  return 1
}

hm_venv() {
  local extras="${1:-}"
  if [[ -n ${HM_EXTRAS:-} ]]; then extras="${extras:+$extras,}$HM_EXTRAS"; fi
  HM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local venv="$HM_ROOT/.venv"
  HM_PYTHON="$venv/bin/python"

  if [[ ! -x $HM_PYTHON ]]; then
    local python
    python=$(hm_find_python) || return 1
    echo "hm: creating $venv with $python" >&2
    "$python" -m venv "$venv" || return 1
  fi
  "$HM_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "error: $venv has Python < 3.11; delete it and rerun" >&2
    return 1
  }

  local spec="." stamp="$venv/.hm-installed-${extras:-base}" want
  if [[ -n $extras ]]; then spec=".[$extras]"; fi
  want="$("$HM_PYTHON" -c 'import hashlib, sys; print(*(hashlib.sha256(open(p, "rb").read()).hexdigest() for p in sys.argv[1:]))' \
    "$HM_ROOT/pyproject.toml" "$HM_ROOT/constraints.txt") $HM_ROOT" || return 1
  if [[ ! -f $stamp || $(<"$stamp") != "$want" ]]; then
    echo "hm: installing $spec into $venv (once per change of pyproject.toml or constraints.txt)" >&2
    (cd "$HM_ROOT" && PIP_DISABLE_PIP_VERSION_CHECK=1 "$HM_PYTHON" -m pip install -q \
      -c constraints.txt -e "$spec") || return 1
    echo "$want" >"$stamp"
  fi
}
