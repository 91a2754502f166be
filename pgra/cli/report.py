"""``pgra report DIR [DIR ...]``: results table (mean ± std over seeds) and paired significance tests of an experiment,
or of several experiment folders and results bundles merged into one table (``--out``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import MAX_RESAMPLES, SEED_MAX, option
from .command import Command


@dataclass
class ReportOptions:
    directories: list[str] = option(default_factory=list, positional=True, metavar="DIR",
                                    help="experiment folder (pgra experiment --out) or results bundle (pgra bundle); "
                                         "several are merged into one table (then --out)")
    out: str = option("", help="folder of the merged report (default: the one DIR given)")
    reference: str = option("fid", help="method every other method is tested against")
    split: str = option("test", path_segment=True, help="split reported")
    bootstrap: int = option(10000, min=1, max=MAX_RESAMPLES, help="bootstrap resamples of the significance test")
    min_inputs: int = option(30, min=1, help="fewer shared test inputs than this: the difference's interval only, no "
                                              "p-value or star (a bootstrap over a handful of inputs is too coarse)")
    seed: int = option(0, min=0, max=SEED_MAX, help="seed of the bootstrap")
    compare: str = option("", metavar="FILE", help="published numbers to compare with: a targets YAML file, or "
                          "'paper' for configs/paper/targets.yaml (the PGRA paper's Table 2 / Table 8)")
    tolerance: float = option(-1.0, help="with --compare: mark cells further than this many points from the "
                              "published value (negative: the file's tolerances)")
    analyses: list[str] = option(default_factory=list, metavar="NAMES",
                                 help="comma-separated analyses to run on the results alone (those that need "
                                      "only predictions, evidence ids and cost records: differences, calibration, "
                                      "cost) into OUT/analysis/, linked from results.md")


def run(opts: ReportOptions) -> None:
    import contextlib
    from pathlib import Path

    from ..core.errors import InputError
    from ..evaluation.bundle import is_bundle
    from ..evaluation.merge import out_is_source
    from ..evaluation.report import write_report
    from ..storage.lock import output_lock

    if not opts.directories:
        raise InputError("no experiment folder given", field="directory")
    for d in opts.directories:
        if not Path(d).is_dir():
            raise InputError(f"no such experiment folder or bundle: {d}", field="directory")
    if len(opts.directories) > 1 and not opts.out:
        raise InputError("several folders are merged into a report of their own: give --out DIR", field="out")
    out = opts.out or opts.directories[0]
    # a report's own folder, or a bundle (nothing else writes there), has one writer: two reports would mix their
    # files; a report beside an experiment's cells is not locked, so an experiment still running can be reported
    locked = not out_is_source(opts.directories, out) or is_bundle(out)
    targets = None
    if opts.compare:
        from ..evaluation.targets import load_targets

        targets = load_targets(opts.compare, opts.tolerance if opts.tolerance >= 0 else None)
    elif opts.tolerance >= 0:
        raise InputError("--tolerance needs --compare FILE", field="tolerance")
    with output_lock(out, "pgra report") if locked else contextlib.nullcontext():
        analysed = None
        if opts.analyses:  # before the report, whose results.md links the figures they draw
            from ..analysis.results import analyze_results

            analysed = analyze_results(opts.directories, out, opts.analyses, opts.split)
        md = write_report(out, opts.reference, opts.split, opts.bootstrap, opts.seed, targets,
                          sources=opts.directories, min_inputs=opts.min_inputs)
    print(md.read_text(encoding="utf-8"))
    if analysed is not None:
        print(f"analyses ({', '.join(analysed.cfg.analysis.analyses)}) written to {analysed.out} (analysis.md)")
    print(f"written: {md}, {md.with_name('results.json')} and {md.with_name('results.html')} (open it in a browser "
          "to explore every input's predictions)")


COMMAND = Command("report", "results table + paired significance of an experiment folder",
                  "pgra.cli.report:ReportOptions", run, from_yaml=False)
