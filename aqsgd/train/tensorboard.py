"""Loss curves where users already look for them: TensorBoard event files.

    tensorboard --logdir OUTPUT_DIR/tensorboard

With `output.tensorboard: true` the last-stage rank of replica 0 (the one rank that
holds the training loss of the replica whose records the summaries read) mirrors its
metrics records (aqsgd.train.metrics) into OUTPUT_DIR/tensorboard/ through
torch.utils.tensorboard. Scalars, all at global step = the record's "step" (the
number of optimizer steps applied to the weights the value was computed with):

    train/loss, lr, step_time_s,
    bytes_sent/activation, bytes_sent/gradient, bytes_sent/dp,   (this rank, that step)
    bytes_recv/activation, bytes_recv/gradient, bytes_recv/dp    from train records;
    eval/loss, eval/perplexity                                   from eval records.

The JSONL records stay the result files; these are a view of them for people.
"""

from __future__ import annotations

from pathlib import Path

from aqsgd.train.metrics import KINDS

__all__ = ["TensorBoardWriter", "tensorboard_dir"]


def tensorboard_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "tensorboard"


class TensorBoardWriter:
    """Writes the scalars of train and eval records as TensorBoard events."""

    def __init__(self, output_dir: str | Path):
        # imported here: tensorboard takes seconds to import and most runs do without it
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(tensorboard_dir(output_dir)), flush_secs=10)

    def write(self, record: dict) -> None:
        step, add = record["step"], self._writer.add_scalar
        if record["kind"] == "eval":
            add("eval/loss", record["eval_loss"], step)
            add("eval/perplexity", record["perplexity"], step)
            return
        if record["kind"] != "train":  # a one-off record (an in-graph half's calibration)
            return
        add("train/loss", record["loss"], step)
        add("lr", record["lr"], step)
        add("step_time_s", record["step_time_s"], step)
        for kind in KINDS:
            add(f"bytes_sent/{kind}", record["bytes_sent"][kind], step)
            add(f"bytes_recv/{kind}", record["bytes_recv"][kind], step)

    def close(self) -> None:
        self._writer.close()
