"""Starting checkpoints shipped with the repository, and the check that their recipe
rebuilds them bit for bit.

    python -m aqsgd.model.shipped ship --preset tiny-4   # pre-train, copy into checkpoints/
    python -m aqsgd.model.shipped check                  # rebuild each one, compare bytes

A fresh clone's `make bench SCENARIO=100mbps` fine-tunes tiny-4, whose pre-training takes
about 50 s on 2 cores; shipping the result keeps the first run within its time. Each file
in SHIPPED_DIR is named as the cache names it (aqsgd.model.pretrain.checkpoint_path: the
hashes of the model config, the tokenizer and the pre-training config), so it is used only
where a build would make the same thing; the .json beside it holds the recipe (model,
tokenizer fingerprint, pre-training config) and what the build measured. The check
rebuilds each from that recipe in a temporary cache, with the shipped copy out of the
way, and compares the saved bytes, then the tensors, so a difference is named.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from aqsgd.data.tokenizer import tokenizer_for
from aqsgd.model.config import PRESETS, ModelConfig
from aqsgd.model.pretrain import (
    SHIPPED_DIR,
    PretrainConfig,
    checkpoint_path,
    starting_checkpoint_path,
)

__all__ = ["check", "ship", "main"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recipe(pt: Path) -> tuple[ModelConfig, PretrainConfig]:
    sidecar = pt.with_suffix(".json")
    if not sidecar.is_file():
        raise ValueError(f"{pt}: its recipe {sidecar.name} is missing")
    meta = json.loads(sidecar.read_text())
    try:
        return ModelConfig(**meta["model"]), PretrainConfig(**meta["pretrain"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{sidecar}: not a checkpoint recipe ({err})") from err


def _tensor_difference(shipped: Path, rebuilt: Path) -> str:
    a = torch.load(shipped, map_location="cpu", weights_only=True)
    b = torch.load(rebuilt, map_location="cpu", weights_only=True)
    if a.keys() != b.keys():
        return f"tensor names differ: {sorted(a.keys() ^ b.keys())}"
    unequal = [k for k in a if not torch.equal(a[k], b[k])]
    if not unequal:
        return "every tensor equal, the file's bytes not (the serialisation differs)"
    worst = max(unequal, key=lambda k: (a[k].double() - b[k].double()).abs().max().item())
    diff = (a[worst].double() - b[worst].double()).abs().max().item()
    return f"{len(unequal)} of {len(a)} tensors differ, most {worst} (max |diff| {diff:.3g})"


def check_one(pt: Path, log: Callable[[str], None]) -> str | None:
    """Rebuild `pt` from its recipe in a temporary cache; None when bit for bit the same,
    else what differs."""
    cfg, pcfg = _recipe(pt)
    with tempfile.TemporaryDirectory(prefix="aqsgd-shipped-") as tmp:
        tokenizer = tokenizer_for(cfg.vocab_size, tmp)
        expected = checkpoint_path(cfg, tmp, tokenizer, pcfg)
        if expected.name != pt.name:
            return (f"its recipe now names {expected.name} (the tokenizer or a config "
                    f"hash changed on this machine)")
        log(f"rebuilding {pt.name} from its recipe")
        rebuilt, _ = starting_checkpoint_path(cfg, tmp, tokenizer=tokenizer, pretrain_cfg=pcfg,
                                              use_shipped=False)
        if _sha256(rebuilt) == _sha256(pt):
            return None
        return _tensor_difference(pt, rebuilt)


def check(log: Callable[[str], None] = print) -> dict[str, str | None]:
    """Every shipped checkpoint -> None (rebuilt bit for bit) or what differs."""
    shipped = sorted(SHIPPED_DIR.glob("*.pt"))
    if not shipped:
        raise FileNotFoundError(f"no shipped checkpoint under {SHIPPED_DIR}")
    return {pt.name: check_one(pt, log) for pt in shipped}


def ship(preset: str, log: Callable[[str], None] = print) -> Path:
    """Pre-train `preset` with the default recipe in a temporary cache and copy the
    checkpoint and its recipe into SHIPPED_DIR; returns the shipped path."""
    cfg = PRESETS[preset]
    with tempfile.TemporaryDirectory(prefix="aqsgd-ship-") as tmp:
        built, _ = starting_checkpoint_path(cfg, tmp, pretrain_cfg=PretrainConfig(),
                                            log=log, use_shipped=False)
        SHIPPED_DIR.mkdir(exist_ok=True)
        for suffix in (".pt", ".json"):
            shutil.copyfile(built.with_suffix(suffix), SHIPPED_DIR / built.with_suffix(suffix).name)
    return SHIPPED_DIR / built.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aqsgd.model.shipped",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ship_cmd = sub.add_parser("ship", help="pre-train a preset and ship its checkpoint")
    ship_cmd.add_argument("--preset", choices=sorted(PRESETS), required=True)
    sub.add_parser("check", help="rebuild every shipped checkpoint and compare bit for bit")
    args = parser.parse_args(argv)
    if args.command == "ship":
        print(f"shipped {ship(args.preset)}")
        return 0
    results = check()
    for name, problem in results.items():
        print(f"{name}: {'rebuilt bit for bit' if problem is None else 'DIFFERS: ' + problem}")
    return 0 if all(p is None for p in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
