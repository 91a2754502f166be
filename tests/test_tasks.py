import json
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.errors import InputError
from pgra.lm.prompts import build_prompt
from pgra.tasks import Example, carve_dev, check_label_words, get_task, list_tasks, load_task, task_from_yaml

FIXTURES = Path(__file__).parent / "fixtures" / "lmbff"
PAPER = {"sst2", "sst5", "cola", "trec", "cr", "mr", "mpqa", "subj"}


def test_registry_has_the_paper_tasks_and_the_demo_task():
    names = {t.name for t in list_tasks()}
    assert PAPER | {"wiki_topic"} <= names
    assert get_task("SST-2").name == "sst2" and get_task("CoLA").metric == "mcc"
    assert all(get_task(n).metric == "accuracy" for n in PAPER - {"cola"})
    with pytest.raises(InputError, match="unknown task 'sst3'.*Did you mean"):
        get_task("sst3")


def test_paper_prompts_and_words_exactly():
    sst2, cola, trec = get_task("sst2"), get_task("cola"), get_task("trec")
    assert sst2.render("a fine film .") == \
        "Does the following sentence have a positive or negative sentiment?\na fine film ."
    assert cola.render("X") == ('The following sentence is either "acceptable", meaning it is grammatically '
                                'correct and makes sense, or "unacceptable". Which is it?\nX')
    assert trec.render("Q ?") == ("Which category best describes the following question: Q ? \n\nChoose from the "
                                  "following list: \nAbbreviation, Entity, Description, Person, Location, Quantity")
    assert get_task("sst5").render("s") == \
        "What sentiment does this sentence have? terrible, bad, okay, good or great\ns"
    assert get_task("subj").render("s") == "Is this a subjective or objective description?\ns"
    assert [trec.demo_words[str(i)] for i in range(6)] == \
        ["Description", "Entity", "Abbreviation", "Human", "Location", "Number"]
    assert [trec.reader_words[str(i)] for i in range(6)] == \
        ["Description", "Entity", "Expression", "Human", "Location", "Number"]
    assert cola.demo_words == {"0": "unacceptable", "1": "acceptable"}
    assert cola.reader_words == {"0": "incorrect", "1": "correct"}
    for name in ("sst2", "mr", "cr", "mpqa"):
        t = get_task(name)
        assert t.demo_words == {"0": "negative", "1": "positive"} and t.reader_words == {"0": "terrible",
                                                                                         "1": "great"}
    assert sst2.reader_input("x y", "ev .", "<extra_id_0>") == "ev . x y This is <extra_id_0> ."
    assert trec.reader_input("Q ?", "ev .", "<extra_id_0>") == "ev . <extra_id_0> : Q ?"
    assert sst2.reader_input("x", "ev", "<extra_id_0>", fmt="released") == "ev x ? <extra_id_0> ,"


def test_rendered_reranker_prompt_matches_the_paper_format():
    task = get_task("trec")
    demos = [Example("a", "What is X ?", "0"), Example("b", "Who is Y ?", "3")]
    prompt = build_prompt(task, demos, "Where is Z ?")
    d1 = task.render("What is X ?").replace("\n\n", "\n") + "\nThe answer is Description"
    d2 = task.render("Who is Y ?").replace("\n\n", "\n") + "\nThe answer is Human"
    assert prompt == "Follow the demonstrations:\n" + d1 + "\n\n" + d2 + "\n\n" + task.render("Where is Z ?") + \
        "\nThe answer is"


def test_lmbff_sst2_tsv_with_header():
    data = load_task(get_task("sst2"), FIXTURES, splits=("train", "test"))
    assert [ex.label for ex in data["train"]] == ["1", "0", "1", "0"]
    assert data["train"][3].text == "the plot is nothing but boilerplate clichés . "
    assert data["test"][0].text.startswith("a masterpiece") and data["train"][0].id == "train-0"
    assert data.provenance["train"]["sha256"]


def test_lmbff_cola_tsv_without_header():
    data = load_task(get_task("cola"), FIXTURES, splits=("train", "test"))
    assert [ex.label for ex in data["train"]] == ["1", "1", "0", "0"]
    assert data["train"][2].text == "They drank the pub."


def test_lmbff_csv_label_first_with_quotes():
    data = load_task(get_task("trec"), FIXTURES, splits=("train", "test"))
    assert data["train"][1].text == "What films featured the character Popeye Doyle , a cop ?"
    assert data["train"][1].label == "1" and len(data["test"]) == 2
    sst5 = load_task(get_task("sst5"), FIXTURES)
    assert sst5["dev"][0].text == "a fine film ." and "carved_from" not in sst5.provenance["dev"]


def test_missing_dev_is_carved_seeded_and_stratified():
    data = load_task(get_task("trec"), FIXTURES)  # trec has no dev file
    prov = data.provenance["dev"]
    assert prov["carved_from"] == "train" and prov["ids"] == [ex.id for ex in data["dev"]]
    assert not {ex.id for ex in data["dev"]} & {ex.id for ex in data["train"]}
    train = [Example(f"t{i}", f"text {i}", str(i % 3)) for i in range(300)]
    a_train, a_dev = carve_dev(train, 0.1, seed=5)
    b_train, b_dev = carve_dev(train, 0.1, seed=5)
    assert a_dev == b_dev and len(a_dev) == 30 and len(a_train) == 270
    assert sorted(ex.label for ex in a_dev) == ["0"] * 10 + ["1"] * 10 + ["2"] * 10
    assert carve_dev(train, 0.1, seed=6)[1] != a_dev


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_rows_name_file_line_and_field(tmp_path):
    sst2 = get_task("sst2")
    root = tmp_path / "original" / "SST-2"
    _write(root / "dev.tsv", "sentence\tlabel\nok\t1\n")
    _write(root / "train.tsv", "sentence\tlabel\ngood\t1\nbad\t7\n")
    with pytest.raises(InputError, match=r"train\.tsv:3 \(field 'label'\): unknown label '7'"):
        load_task(sst2, tmp_path)
    _write(root / "train.tsv", "text\tlabel\ngood\t1\n")
    with pytest.raises(InputError, match=r"train\.tsv:1 \(field 'sentence'\).*lacks"):
        load_task(sst2, tmp_path)
    _write(root / "train.tsv", "sentence\tlabel\n  \t1\n")
    with pytest.raises(InputError, match=r"train\.tsv:2 \(field 'text'\): empty text"):
        load_task(sst2, tmp_path)
    with pytest.raises(InputError, match=r"original/CoLA/train\.tsv: data file not found"):
        load_task(get_task("cola"), tmp_path)


def _custom_yaml(tmp_path: Path, **changes) -> Path:
    spec = {
        "name": "spam", "labels": ["ham", "spam"],
        "rerank_template": "Is this message spam?\n{text}",
        "demo_words": {"ham": "no", "spam": "yes"}, "reader_words": {"ham": "ham", "spam": "spam"},
        "metric": "macro_f1",
        "data": {"format": "jsonl", "path": "spam_data", "id_column": "uid", "text_column": "body",
                 "label_column": "y", "files": {"train": "train.jsonl", "test": "test.jsonl"}},
    }
    spec.update(changes)
    import yaml

    return _write(tmp_path / "spam.yaml", yaml.safe_dump(spec))


def _spam_rows(rows):
    return "\n".join(json.dumps({"uid": u, "body": b, "y": y}) for u, b, y in rows) + "\n"


def test_custom_yaml_task_everywhere_a_name_is_accepted(tmp_path, capsys):
    path = _custom_yaml(tmp_path)
    _write(tmp_path / "spam_data" / "train.jsonl", _spam_rows(
        [(f"m{i}", f"message number {i}", "spam" if i % 2 else "ham") for i in range(20)]))
    _write(tmp_path / "spam_data" / "test.jsonl", _spam_rows([("t1", "win money now", "spam")]))
    task = get_task(str(path))
    assert task.name == "spam" and task.source == str(path)
    data = load_task(task, "unused-data-dir")  # data.path is relative to the YAML file
    assert len(data["dev"]) == 2 and data["test"][0].id == "t1"
    assert main(["tasks", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Is this message spam?\n{text}" in out and "The answer is yes" in out
    out_dir = tmp_path / "export"
    assert main(["tasks", "export", str(path), "--out", str(out_dir)]) == 0
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["counts"] == {"train": 18, "dev": 2, "test": 1}
    assert manifest["provenance"]["dev"]["carved_from"] == "train"
    rec = json.loads((out_dir / "test.jsonl").read_text().splitlines()[0])
    assert rec == {"id": "t1", "text": "win money now", "label": "spam"}


def test_custom_task_bad_input(tmp_path):
    with pytest.raises(InputError, match=r"spam\.yaml \(field 'rerank_template'\).*no \{text\} placeholder"):
        task_from_yaml(_custom_yaml(tmp_path, rerank_template="Is this spam?"))
    with pytest.raises(InputError, match=r"field 'demo_words'.*missing \['spam'\]"):
        task_from_yaml(_custom_yaml(tmp_path, demo_words={"ham": "no"}))
    with pytest.raises(InputError, match=r"spam\.yaml \(field 'lables'\).*Did you mean: labels"):
        task_from_yaml(_custom_yaml(tmp_path, lables=["a"]))
    task = task_from_yaml(_custom_yaml(tmp_path))
    _write(tmp_path / "spam_data" / "train.jsonl", _spam_rows([("a", "x", "ham"), ("a", "y", "spam")]))
    with pytest.raises(InputError, match=r"train\.jsonl:2 \(field 'uid'\): duplicate id 'a'"):
        load_task(task, tmp_path)
    _write(tmp_path / "spam_data" / "train.jsonl", '{"uid": "a", "text": "x", "y": "ham"}\n')
    with pytest.raises(InputError, match=r"train\.jsonl:1 \(field 'body'\): missing text column"):
        load_task(task, tmp_path)
    _write(tmp_path / "spam_data" / "train.jsonl", '{"uid": "a", "body": "x"}\n')
    with pytest.raises(InputError, match=r"train\.jsonl:1 \(field 'y'\): missing label"):
        load_task(task, tmp_path)


def test_hf_dataset_from_local_files_with_label_map(tmp_path):
    folder = tmp_path / "hfdata"
    _write(folder / "train.csv", "sentence,sentiment\nnice,pos\nawful,neg\nfine,pos\nbad,neg\n")
    _write(folder / "test.csv", "sentence,sentiment\ngreat,pos\n")
    path = _custom_yaml(tmp_path, data={"format": "hf", "path": str(folder), "text_column": "sentence",
                                        "label_column": "sentiment", "label_map": {"pos": "spam", "neg": "ham"},
                                        "dev_fraction": 0.5})
    data = load_task(get_task(str(path)), tmp_path)
    assert [ex.label for ex in data["test"]] == ["spam"]
    assert sorted(ex.label for ex in data["dev"]) == ["ham", "spam"]


def test_label_word_split_warning():
    class Tok:
        def tokenize(self, text):  # words longer than 5 characters become two pieces
            word = text.strip()
            return [word[:5], word[5:]] if len(word) > 5 else [word]

    warnings = check_label_words(get_task("subj"), Tok())
    assert len(warnings) == 2 and "label '0' word 'subjective' is split into 2 tokens" in warnings[0]
    sst2 = check_label_words(get_task("sst2"), Tok())  # 'great' is one piece, 'terrible' two
    assert len(sst2) == 1 and "word 'terrible'" in sst2[0]



def test_tasks_show_sst2_prints_the_papers_prompt(capsys):
    assert main(["tasks", "show", "sst2", "--data-dir", str(FIXTURES)]) == 0
    out = capsys.readouterr().out
    assert "Does the following sentence have a positive or negative sentiment?\n{text}" in out
    expected = build_prompt(get_task("sst2"), [Example("0", "it 's a charming and often affecting journey . ", "1"),
                                               Example("1", "unflinchingly bleak and desperate ", "0")],
                            "a gorgeous , witty , seductive movie . ")
    assert expected in out
    assert expected.startswith("Follow the demonstrations:\nDoes the following sentence have a positive or negative "
                               "sentiment?\nit 's a charming and often affecting journey . \nThe answer is positive\n\n")
