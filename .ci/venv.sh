# Sourced by the Python end-to-end scripts: `ensure_venv VENV REQUIREMENTS PYTHON LABEL` builds
# the virtualenv VENV from the pinned REQUIREMENTS, or reuses it while the pins are unchanged
# (the venv keeps a copy of the requirements it was built from).
ensure_venv() {
  local venv=$1 requirements=$2 python=$3 label=$4
  if ! cmp -s "$requirements" "$venv/.crewline-requirements.txt" 2>/dev/null; then
    echo "== $label venv: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/.crewline-requirements.txt"
  fi
}
