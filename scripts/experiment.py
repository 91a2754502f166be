#!/usr/bin/env python
"""Run an experiment grid: `accelerate launch scripts/experiment.py --config configs/paper/experiment_table2.yaml`.

Also `torchrun --nproc_per_node N scripts/experiment.py ...` or plain `python scripts/experiment.py ...`; same flags
as `pgra experiment`. The stages shard their work over the processes; the cells run side by side, one process
(one device) each (`parallel: cells`), or each as one DDP job over all of them (`parallel: ddp`).
"""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", *sys.argv[1:]]))
