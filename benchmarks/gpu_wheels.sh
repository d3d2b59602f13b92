#!/usr/bin/env bash
# Wheels of the runner's dependencies for a GPU machine without network whose Python (3.12 by default) already
# has torch and the scientific stack, as a CUDA image does. Run from the project's root on a machine that reaches
# the package index: it fills .whl/ (ignored by git). On the GPU machine (docs/benchmarks.md, "The GPU check"):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gpu_check.py
# GPU_PYTHON=3.11 builds for another version.
set -euo pipefail
version=${GPU_PYTHON:-3.12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# omegaconf's parser, antlr4-python3-runtime 4.9.3, is published as a source archive only: build its wheel here
python3 -m pip wheel -q --no-deps -w "$work/built" "antlr4-python3-runtime==4.9.3"
platforms=()
for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64 any; do
  platforms+=(--platform "$tag")
done
python3 -m pip download -q --only-binary=:all: --find-links "$work/built" --python-version "$version" \
  --implementation cp "${platforms[@]}" -d "$work/all" \
  "hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" "mlflow>=3.1" "hydra-submitit-launcher>=1.2,<1.3" "ruptures>=1.1"
# what a CUDA image with PyTorch has already: its own builds stay
image_has=" torch triton numpy scipy pandas pyarrow matplotlib scikit-learn pillow fonttools kiwisolver contourpy
 cycler pyparsing python-dateutil six packaging pyyaml jinja2 markupsafe click werkzeug requests urllib3 idna
 certifi charset-normalizer protobuf psutil pytest pluggy iniconfig typing-extensions filelock fsspec sympy
 mpmath networkx joblib threadpoolctl "
mkdir -p .whl
for wheel in "$work"/all/*.whl; do
  name=$(basename "$wheel" | sed 's/-[0-9].*//' | tr '[:upper:]_' '[:lower:]-')
  case "$image_has" in *" $name "*) ;; *) cp "$wheel" .whl/ ;; esac
done
cp "$work"/built/*.whl .whl/
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1), in .whl/"
