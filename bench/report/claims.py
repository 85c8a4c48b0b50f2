"""The published claims as data (results/reference/claims.yaml): reading them, and
finding one by its id. The paper report (bench.report.paper) draws them beside the
speed figures; the convergence report (bench.report.convergence) judges the quality
claims.

    claims = load_claims()          # list of mappings, each with an `id`
"""

from __future__ import annotations

from pathlib import Path

from bench import REPO_ROOT
from specfile import read_file

__all__ = ["CLAIMS_FILE", "load_claims", "find_claim"]

CLAIMS_FILE = REPO_ROOT / "results" / "reference" / "claims.yaml"


def load_claims(path: str | Path = CLAIMS_FILE) -> list[dict]:
    """The `claims` entries of a claims file (each with an `id`); ValueError naming the
    file when it holds none."""
    data = read_file(path, error=ValueError, what="claims file")
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list) or not all(isinstance(c, dict) and "id" in c
                                               for c in claims):
        raise ValueError(f"{path}: expected a mapping with a list `claims` of entries "
                         f"with an `id`")
    return claims


def find_claim(claims: list[dict], claim_id: str) -> dict | None:
    """The claim with this id, None when the file has none."""
    return next((c for c in claims if c["id"] == claim_id), None)
