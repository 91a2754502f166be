"""A model path or hub id that cannot be loaded is one `error:` line naming it (exit 2), never a traceback."""

import pytest

from pgra.cli import main


@pytest.mark.parametrize("kind", ["missing folder", "empty folder"])
def test_unloadable_models_are_one_error_line(kind, tmp_path, corpus_txt, candidates, capsys):
    bad = tmp_path / "no-such-model"
    if kind == "empty folder":
        bad.mkdir()
    commands = {
        "encoder": ["build-index", "--corpus", str(corpus_txt), "--encoder", str(bad), "--out", str(tmp_path / "i")],
        "lm": ["rerank", "--candidates", str(candidates), "--out", str(tmp_path / "r"), "--lm", str(bad),
               "--cache-dir", str(tmp_path / "c")],
        "icl lm": ["icl", "--data", str(candidates), "--out", str(tmp_path / "icl"), "--lm", str(bad),
                   "--selection", "random", "--num-demos", "2"],
        "model": ["train", "--data", str(candidates), "--out", str(tmp_path / "t"), "--model", str(bad),
                  "--n-passages", "1", "--max-steps", "1"],
    }
    for field, argv in commands.items():
        assert main(argv) == 2, argv
        stderr = capsys.readouterr().err
        err = [line for line in stderr.splitlines() if line.startswith("error: ")]
        assert len(err) == 1 and "Traceback" not in stderr, (argv, stderr)
        assert str(bad) in err[0] and f"field '{field.split()[-1]}'" in err[0], (argv, err)
        if kind == "missing folder":
            assert "no such folder" in err[0]


def test_causal_lms_pass_the_architecture_check_and_load_every_weight(tiny_lm):
    """OPT (and OPT-350m's projected shape), GPT-2 and Llama: causal LMs by their config, every weight from the
    checkpoint, with the LM head and without it."""
    from pgra.lm.causal_lm import CausalLM

    for head in ("lm", "none"):
        assert CausalLM(str(tiny_lm), device="cpu", head=head).model is not None


def test_an_encoder_is_no_causal_lm_unless_configured_as_a_decoder(tiny_bert, tmp_path):
    """The config's architecture against transformers' causal-LM mapping, before any weights load: a BERT is
    refused under the field at hand; a BERT configured as a decoder (``is_decoder``, BertLMHeadModel) is one."""
    import json
    import shutil

    from pgra.core.errors import InputError
    from pgra.lm.causal_lm import CausalLM

    with pytest.raises(InputError) as e:
        CausalLM(str(tiny_bert), device="cpu", role="rewriting LM", field="rewrite_lm")
    assert e.value.field == "rewrite_lm" and "is a BertModel (model type 'bert', an encoder), not a causal LM" \
        in str(e.value)
    decoder = shutil.copytree(tiny_bert, tmp_path / "bert-decoder")
    config = json.loads((decoder / "config.json").read_text())
    (decoder / "config.json").write_text(json.dumps({**config, "is_decoder": True,
                                                     "architectures": ["BertLMHeadModel"]}))
    assert CausalLM(str(decoder), device="cpu", head="none").config.is_decoder


def test_newly_initialised_weights_are_the_missing_and_mismatched_keys():
    from pgra.lm.causal_lm import newly_initialised

    assert newly_initialised({"missing_keys": {"b", "a"}, "unexpected_keys": {"c"}, "mismatched_keys": set()}) == \
        ["a", "b"]
    assert newly_initialised({"missing_keys": [], "mismatched_keys": [("head.weight", (2, 4), (3, 4))]}) == \
        ["head.weight"]
    assert newly_initialised({"missing_keys": set(), "unexpected_keys": {"pooler.dense.weight"}}) == []


def test_an_icl_lm_without_its_head_is_refused_when_it_loads(tmp_path):
    """In-context learning scores label words with the LM head: a checkpoint without it is refused, naming it."""
    from pgra.core.errors import InputError
    from pgra.lm.label_scoring import LabelScorer
    from tests.matrix_r4_rerank import headless_lm_at

    lm = headless_lm_at(tmp_path / "headless")
    scorer = LabelScorer(str(lm), device="cpu")  # (the config is a causal LM's: Llama)
    with pytest.raises(InputError, match=r"field 'lm': the causal LM .*lm_head\.weight would be initialised at random"):
        scorer.score(["The sky is"], ["blue", "red"])
