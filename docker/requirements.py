"""Print the project's pinned runtime dependencies for the worker image, as the
installed package declares them (`make setup` installs it from pyproject.toml).

    python docker/requirements.py > docker/wheelhouse/requirements.txt

Left out: Triton (the workers run the CPU quantizer on CPU hosts, and a CUDA PyTorch
base image brings the Triton its torch build requires) and the Docker SDK (the
launcher uses it on the host, never inside a container). Extras (dev) are skipped.
"""

import re
from importlib.metadata import requires

PACKAGE = "aqsgd-bench"
LEFT_OUT = {"triton", "docker"}


def main() -> None:
    for req in requires(PACKAGE) or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower()
        if name not in LEFT_OUT:
            print(req)


if __name__ == "__main__":
    main()
