"""Builders of the bad-input matrix's issue-27 part-B cases (tests/test_bad_input_matrix.py): an index, reranked
folder or run whose manifest allows a model's own code, label words a tokenizer cannot tell apart, experiment
cells whose predictions changed after they finished. Each writes under the case's ``w["tmp"]`` only."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

EVIL = """from pathlib import Path

Path({marker!r}).write_text("the model folder's code ran")

from transformers import BertConfig, BertModel


class EvilConfig(BertConfig):
    model_type = "evil-bert"


class EvilModel(BertModel):
    config_class = EvilConfig
"""


def tiny_bert(w: dict) -> Path:
    from tests.conftest import _write_tiny_bert

    path = w["tmp"] / "b-bert"
    return path if path.exists() else _write_tiny_bert(path)


def make_evil(folder: Path) -> Path:
    """Give a saved BERT an ``auto_map`` to a module that leaves ``folder.name + '-RAN'`` next to it on import."""
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "evil-bert"
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(EVIL.format(marker=str(folder.parent / f"{folder.name}-RAN")))
    return folder


def evil_index(w: dict) -> Path:
    """A dense index whose encoder has code of its own and whose manifest says to trust it."""
    from pgra.retrieval.index import DenseConfig, IndexConfig, build_index
    from pgra.storage.artifacts import model_fingerprint

    enc = w["tmp"] / "b-evil-encoder"
    shutil.copytree(tiny_bert(w), enc)
    out = build_index(IndexConfig(corpus=str(w["corpus"]), out=str(w["tmp"] / "b-evil-index"),
                                  dense=DenseConfig(encoder=str(enc), pooler="mean"), show_progress=False))
    make_evil(enc)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["dense"]["trust_remote_code"] = True
    manifest["encoder_fingerprint"] = model_fingerprint(str(enc))
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def evil_icl_run(w: dict) -> Path:
    """A finished-looking ``icl`` run whose LM has code of its own and whose manifest says to trust it."""
    from pgra.core.config import to_dict
    from pgra.icl.config import ICLConfig
    from pgra.storage.artifacts import write_manifest
    from pgra.tasks import get_task

    lm = make_evil(shutil.copytree(tiny_bert(w), w["tmp"] / "b-evil-lm"))
    run = w["tmp"] / "b-icl-run"
    run.mkdir()
    write_manifest(run, {"kind": "icl", "task": to_dict(get_task(str(w["task"]))), "data": str(w["cands"]),
                         "config": to_dict(ICLConfig(lm=str(lm), trust_remote_code=True))})
    return run


def bert2bert(w: dict) -> Path:
    """A tiny bert2bert reader (BERT's WordPiece vocabulary: no emoji, lower-cased)."""
    from transformers import EncoderDecoderModel

    from pgra.reader.fid import load_tokenizer

    path = w["tmp"] / "b-bert2bert"
    if path.exists():
        return path
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(str(tiny_bert(w)), str(tiny_bert(w)))
    tok = load_tokenizer(str(tiny_bert(w)))
    model.config.decoder_start_token_id, model.config.pad_token_id = tok.cls_token_id, tok.pad_token_id
    model.config.eos_token_id = tok.sep_token_id
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def data_with_reader_words(w: dict, words: dict[str, str]) -> Path:
    """A copy of the candidates folder whose recorded task has the reader words ``words``."""
    from pgra.core.config import from_dict, to_dict
    from pgra.tasks import TaskSpec

    d = w["tmp"] / "b-words-data"
    shutil.copytree(w["cands"], d)
    manifest = json.loads((d / "manifest.json").read_text())
    task = from_dict(TaskSpec, manifest["task"])
    manifest["task"] = to_dict(replace(task, reader_words=words))
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def changed_cell(w: dict, checksums: bool) -> tuple[Path, Path]:
    """An experiment folder with one finished cell whose test predictions changed after it finished: edited (one
    right prediction made wrong; a cell without checksums) or truncated (a cell with checksums). Returns the folder
    and the changed file."""
    from pgra.core.config import to_dict
    from pgra.tasks import get_task

    task = get_task(str(w["task"]))
    cell = w["tmp"] / "b-exp" / task.name / "fid" / "seed-1"
    cell.mkdir(parents=True)
    gold = [task.labels[i % 2] for i in range(6)]
    lines = [{"id": f"t{i}", "text": f"input {i}", "label": g, "prediction": g, "scores": {}, "evidence": []}
             for i, g in enumerate(gold)]
    path = cell / "predictions_test.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    record = {"kind": "cell", "task": task.name, "task_spec": to_dict(task), "method": "fid", "seed": 1,
              "metric": task.metric, "results": {"test": {task.metric: 1.0, "examples": 6, "invalid_predictions": 0}},
              "settings": {}, "config": {}}
    if checksums:
        record["predictions_sha256"] = {"test": hashlib.sha256(path.read_bytes()).hexdigest()}
        path.write_text("".join(json.dumps(x) + "\n" for x in lines[:4]))
    else:
        lines[0]["prediction"] = task.labels[1] if gold[0] == task.labels[0] else task.labels[0]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (cell / "cell.json").write_text(json.dumps(record))
    return w["tmp"] / "b-exp", path


# --- issue 41: non-UTF-8 files, hand-edited cell.json, a full disk under safetensors ---

LATIN1 = "sun\ncafé au lait\n".encode("latin-1")  # line 2 holds \xe9: not UTF-8


def latin1(w: dict, name: str, head: bytes = b"") -> Path:
    """A file ``tmp/name`` whose 2nd line (after ``head``'s lines) is Latin-1, not UTF-8."""
    path = w["tmp"] / name
    path.write_bytes(head + LATIN1)
    return path


def latin1_task(w: dict) -> Path:
    """The sky task over a copy of its data whose train.jsonl has a Latin-1 2nd line."""
    import yaml

    data = w["tmp"] / "latin-data"
    shutil.copytree(w["tmp"] / "skydata", data)
    lines = (data / "train.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"The", "Thé".encode("latin-1"), 1)
    (data / "train.jsonl").write_bytes(b"".join(lines))
    spec = yaml.safe_load(w["task"].read_text())
    spec["data"]["path"] = "latin-data"
    path = w["tmp"] / "latin-task.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def edited_cell(w: dict, change: dict | None = None, text: str | None = None) -> Path:
    """An experiment folder with one finished, unchanged cell whose ``cell.json`` was then edited by hand: the
    fields in ``change`` set (a value None removes the field), or the whole file replaced by ``text``."""
    folder, path = changed_cell(w, checksums=True)
    lines = [json.loads(x) for x in (path.parent / "cell.json").read_text().splitlines()]
    record = lines[0]
    good = [{"id": f"t{i}", "text": f"input {i}", "label": record["task_spec"]["labels"][i % 2],
             "prediction": record["task_spec"]["labels"][i % 2], "scores": {}, "evidence": []} for i in range(6)]
    path.write_text("".join(json.dumps(x) + "\n" for x in good))  # the predictions the cell recorded
    record["predictions_sha256"] = {"test": hashlib.sha256(path.read_bytes()).hexdigest()}
    for key, value in (change or {}).items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    (path.parent / "cell.json").write_text(text if text is not None else json.dumps(record))
    return folder


def train_on_full_disk(w: dict) -> list[str]:
    """``pgra train`` of the tiny reader where every safetensors save fails as on a full disk: safetensors' own
    error type, with the message its Rust code gives (a save on a full tmpfs reads the same)."""
    import safetensors.torch
    from safetensors import SafetensorError

    model = bert2bert(w)  # built before the disk fills

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    w["mp"].setattr(safetensors.torch, "serialize_file", full)
    return ["train", "--data", str(w["cands"]), "--model", str(model), "--out", str(w["tmp"] / "o"), "--max-steps",
            "1"]


def latin1_csv_task(w: dict) -> Path:
    """The sky task as CSV files whose train.csv has a Latin-1 3rd line (the header is line 1)."""
    import csv
    import io

    import yaml

    data = w["tmp"] / "latin-csv"
    data.mkdir()
    for split in ("train", "test"):
        rows = [json.loads(x) for x in (w["tmp"] / "skydata" / f"{split}.jsonl").read_text().splitlines()]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows([r["text"], r["label"]] for r in rows)
        raw = text.getvalue().encode()
        if split == "train":
            lines = raw.splitlines(keepends=True)
            lines[2] = lines[2].replace(b"The", "Thé".encode("latin-1"), 1)
            raw = b"".join(lines)
        (data / f"{split}.csv").write_bytes(raw)
    spec = yaml.safe_load(w["task"].read_text())
    spec["data"] = {"format": "csv", "path": "latin-csv", "files": {"train": "train.csv", "test": "test.csv"},
                    "dev_fraction": 0.15}
    path = w["tmp"] / "latin-csv-task.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def cell_with_latin1_predictions(w: dict) -> Path:
    """An experiment folder whose one cell (written before cells recorded checksums) has test predictions with a
    Latin-1 2nd line."""
    folder = edited_cell(w, {"predictions_sha256": None})
    path = folder / "sky" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"input", "inpüt".encode("latin-1"), 1)
    path.write_bytes(b"".join(lines))
    return folder


def latin1_data(w: dict) -> Path:
    """A copy of the candidates folder (its manifest without file checksums) whose train.jsonl has a Latin-1 2nd
    line."""
    d = w["tmp"] / "latin-cands"
    shutil.copytree(w["cands"], d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest.pop("files")
    (d / "manifest.json").write_text(json.dumps(manifest))
    lines = (d / "train.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"The", "Thé".encode("latin-1"), 1)
    (d / "train.jsonl").write_bytes(b"".join(lines))
    return d
