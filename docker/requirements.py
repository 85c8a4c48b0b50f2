"""Print the project's pinned runtime dependencies (pyproject.toml) for the worker image.

    python docker/requirements.py pyproject.toml > docker/wheelhouse/requirements.txt

Triton is left out: the workers run the CPU quantizer on CPU hosts, and a CUDA
PyTorch base image brings the Triton its torch build requires.
"""

import sys
import tomllib

LEFT_OUT = ("triton",)


def main(path: str) -> None:
    with open(path, "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for dep in deps:
        if not dep.split("=")[0].strip().lower().startswith(LEFT_OUT):
            print(dep)


if __name__ == "__main__":
    main(sys.argv[1])
