"""``pgra eval-encoder``: sentence encoders judged by what they retrieve (same-group recall@k, kNN accuracy)."""

from __future__ import annotations

from .command import Command


def run(cfg) -> None:
    from ..simcse.quality import compare_encoders, format_rows

    rows = compare_encoders(cfg)
    first = rows[0]
    if "queries" in first:
        print(f"same-group recall@k: {first['queries']} queries over {first['search_space']} sentences "
              f"({first['groups']} groups)")
    if "task" in first:
        print(f"kNN accuracy: {first['task']} dev ({first['dev_inputs']} inputs), k={first['knn_k']}")
    print(format_rows(rows))
    if cfg.out:
        print(f"written to {cfg.out}")


COMMAND = Command("eval-encoder", "compare sentence encoders by what they retrieve (recall@k, kNN accuracy)",
                  "pgra.simcse.quality:EvalEncoderConfig", run,
                  description="Measure each encoder under each pooler: recall@k of another sentence of the same "
                              "group (e.g. Wikipedia article) among a search space of grouped and distractor "
                              "sentences, and, with eval.task, the dev accuracy of a kNN vote over the training "
                              "inputs. The eval section is set in YAML (--config) or with eval.FIELD=...")
