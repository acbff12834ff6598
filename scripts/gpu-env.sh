# Sourced by scripts/gpu-check.sh and scripts/gpu-study.sh: install the wheels scripts/gpu-prepare.sh put in
# .whl/ (or $GPU_CHECK_WHEELS) into .site/ (or $GPU_CHECK_SITE) without the network, put it and the project
# on PYTHONPATH, and log what was installed and the packages' versions to the file named by $1.
PY=${PYTHON:-python3}
wheels=${GPU_CHECK_WHEELS:-.whl}
site=${GPU_CHECK_SITE:-.site}
case "$site" in /*) ;; *) site="$PWD/$site" ;; esac
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "date $(date -Iseconds), $(uname -srm), $("$PY" -V 2>&1)"
  if compgen -G "$wheels/*.whl" > /dev/null; then
    echo "\$ $PY -m pip install --no-index --no-deps --upgrade --target $site $wheels/*.whl"
    "$PY" -m pip install --no-index --no-deps --upgrade --quiet --disable-pip-version-check --target "$site" \
      "$wheels"/*.whl 2>&1
    echo "exit $?"
  else
    echo "no wheels in $wheels (scripts/gpu-prepare.sh makes them): using what is installed"
  fi
  "$PY" -c 'import os, time; t = os.environ.get("GPU_T0"); print("ready after", round(time.time() - float(t), 1) if t else "?", "s")'
  # the versions from the installed packages' metadata, without importing them (torch alone takes seconds): what
  # torch sees (CUDA, the GPU) is in the summary the Python script writes
  "$PY" - <<'PYTHON' 2>&1
from importlib.metadata import PackageNotFoundError, version
def of(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"
print(*(f"{n} {of(n)}" for n in ("torch", "pydantic", "fastapi", "starlette", "uvicorn", "langid", "sentence-splitter")))
PYTHON
} > "$1" 2>&1
tail -n 3 "$1"
