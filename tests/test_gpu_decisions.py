"""What the GPU path decides, tested without a GPU: which faiss-gpu options an index is cloned with, which indexes
stay on the CPU, where a search beyond faiss-gpu's k limit runs (faiss-gpu's calls stood in for on the real
faiss-cpu module), and the arguments a causal LM is loaded with (``from_pretrained`` stood in for)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from pgra.core.errors import InputError
from pgra.retrieval import dense
from pgra.retrieval.dense import GPU_MAX_K, FaissParams, load_faiss, pq_lookup_bytes, search_faiss


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class _GpuIndex:
    """What faiss-gpu gives back: searches the CPU index it was cloned from, refusing k above its limit as
    faiss-gpu does; records every k asked for."""

    def __init__(self, index, log: list) -> None:
        self.index, self.log = index, log
        self.ntotal, self.d = index.ntotal, index.d

    def search(self, queries, k):
        self.log.append(("gpu search", k))
        if k > GPU_MAX_K:
            raise RuntimeError(f"Error: 'k > 0 && k <= GPU_MAX_SELECTION_K' failed: k {k}")
        return self.index.search(queries, k)


class _Gpus:
    """faiss-gpu's entry points on the real faiss module (monkeypatched in): the clones and their options."""

    def __init__(self, monkeypatch, n_gpus: int = 1) -> None:
        self.calls: list = []
        calls = self.calls

        class GpuClonerOptions:
            useFloat16 = False

        class GpuMultipleClonerOptions(GpuClonerOptions):
            shard = False

        def index_cpu_to_gpu(resources, device, index, co=None):
            calls.append(("index_cpu_to_gpu", device, bool(co and co.useFloat16)))
            return _GpuIndex(index, calls)

        def index_cpu_to_gpus_list(index, co=None, gpus=None):
            calls.append(("index_cpu_to_gpus_list", list(gpus), co.shard, co.useFloat16))
            return _GpuIndex(index, calls)

        for name, value in {"StandardGpuResources": type("StandardGpuResources", (), {}),
                            "get_num_gpus": lambda: n_gpus, "GpuClonerOptions": GpuClonerOptions,
                            "GpuMultipleClonerOptions": GpuMultipleClonerOptions,
                            "index_cpu_to_gpu": index_cpu_to_gpu,
                            "index_cpu_to_gpus_list": index_cpu_to_gpus_list}.items():
            monkeypatch.setattr(faiss, name, value, raising=False)
        for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(dense, "_said", set())


def _saved(tmp_path, dim: int, factory: str):
    path = tmp_path / "index.faiss"
    faiss.write_index(faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT), str(path))
    return path


def test_faiss_computes_the_lookup_tables_as_stated():
    assert pq_lookup_bytes(96, 8, fp16=False) == 98_304  # 768 dims, pq_m 96: above a block's 49,152 bytes
    assert pq_lookup_bytes(96, 8, fp16=True) == 49_152  # fits in fp16
    assert pq_lookup_bytes(48, 8, fp16=False) == 49_152  # 384 dims, pq_m 48: fits in fp32


@pytest.mark.parametrize("n_gpus", [1, 2])
@pytest.mark.parametrize("dim,factory,fp16", [
    (768, "IVF4,PQ96x8", True),  # 98,304 B in fp32: fp16 tables (49,152 B)
    (768, "OPQ96,IVF4,PQ96x8", True),  # under an OPQ rotation too
    (384, "IVF4,PQ48x8", False),  # 49,152 B in fp32: fits as it is
    (768, "IVF4,PQ64x8", True),
    (64, "IVF4,SQ8", False),
    (64, "Flat", False),  # fp16 would store a flat index's vectors in fp16: never asked for
])
def test_an_ivfpq_index_gets_fp16_lookup_tables_when_fp32_ones_exceed_shared_memory(monkeypatch, tmp_path, n_gpus,
                                                                                    dim, factory, fp16):
    gpus = _Gpus(monkeypatch, n_gpus)
    loaded = load_faiss(_saved(tmp_path, dim, factory), use_gpu=True)
    assert isinstance(loaded, dense.GpuIndex)
    want = ("index_cpu_to_gpu", 0, fp16) if n_gpus == 1 else ("index_cpu_to_gpus_list", [0, 1], True, fp16)
    assert gpus.calls == [want]


@pytest.mark.parametrize("dim,factory,need", [(1024, "IVF4,PQ128x8", "65,536"), (64, "IVF4,PQ32x10", "65,536")])
def test_an_ivfpq_index_whose_fp16_tables_do_not_fit_is_refused(monkeypatch, tmp_path, dim, factory, need):
    gpus = _Gpus(monkeypatch)
    with pytest.raises(InputError) as e:
        load_faiss(_saved(tmp_path, dim, factory), use_gpu=True)
    assert str(e.value).startswith("field 'dense.faiss.pq_m': ") and "\n" not in str(e.value)
    assert f"need {need} bytes of GPU shared memory even in fp16" in str(e.value)
    assert "use_gpu_faiss=false" in str(e.value)
    assert gpus.calls == []
    assert isinstance(load_faiss(_saved(tmp_path, dim, factory), use_gpu=False), faiss.Index)  # the CPU takes it


def test_an_ivf_index_with_its_lists_on_disk_stays_on_the_cpu_said_once(monkeypatch, tmp_path, capsys):
    from pgra.retrieval.dense_build import FAISS_FILE, shard_name, write_dense_index
    from pgra.retrieval.dense_retriever import DenseConfig

    params = FaissParams(nlist=4, nprobe=4)
    base = _unit(200, 8, 6)
    build, out = tmp_path / "build", tmp_path / "out"
    build.mkdir()
    out.mkdir()
    for i, start in enumerate(range(0, 200, 61)):
        np.save(build / shard_name(i), base[start:start + 61])
    write_dense_index(DenseConfig(shard_size=61, index_type="ivf", faiss=params, bounded_memory=True), 200, build,
                      out, show=False)
    capsys.readouterr()
    gpus = _Gpus(monkeypatch, 2)
    for _ in range(2):
        index = load_faiss(out / FAISS_FILE, params, use_gpu=True, on_disk=True)
        assert isinstance(faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists),
                          faiss.OnDiskInvertedLists)
        assert index.search(base[:3], 1)[1].ravel().tolist() == [0, 1, 2]
    assert gpus.calls == []  # never copied to a GPU
    err = capsys.readouterr().err
    assert err.count("note: ") == 1 and "lists are on disk is searched on the CPU" in err
    assert dense._lists_on_disk(index)


def test_a_search_beyond_faiss_gpus_k_limit_runs_on_the_cpu_index(monkeypatch, tmp_path):
    """The exclusion retry (k plus every excluded id) and re-scoring (k x rescore) may ask for more than 2048 hits:
    up to the limit the GPU searches, beyond it the CPU index read from the same file, with the same results."""
    from pgra.retrieval.shards import VectorShards, search_index

    base, queries = _unit(3000, 16, 0), _unit(5, 16, 1)
    cpu = faiss.IndexFlatIP(16)
    cpu.add(base)
    path = tmp_path / "index.faiss"
    faiss.write_index(cpu, str(path))
    gpus = _Gpus(monkeypatch)
    index = load_faiss(path, use_gpu=True)
    assert index.ntotal == 3000 and index.d == 16
    for k in (GPU_MAX_K, GPU_MAX_K + 1, 3000):
        got = search_faiss(index, queries, k)
        want = cpu.search(queries, k)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
    assert [c for c in gpus.calls if c[0] == "gpu search"] == [("gpu search", GPU_MAX_K)]
    np.save(tmp_path / "emb_00000.npy", base)
    stored = VectorShards([tmp_path / "emb_00000.npy"])
    scores, ids = search_index(index, queries, 600, stored, factor=4)  # 2,400 candidates re-scored
    np.testing.assert_array_equal(ids, stored.search(queries, 600)[1])
    assert ("gpu search", 2400) not in gpus.calls


# ----- the causal LM's loading -----

class _Loaded(torch.nn.Module):
    """What a mocked ``from_pretrained`` returns: records where it was moved."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 2)
        self.moved: list = []

    def get_input_embeddings(self):
        return self.embed

    def to(self, *args, **kwargs):
        self.moved.append(args)
        return self


@pytest.fixture()
def from_pretrained(monkeypatch):
    """``AutoModel(ForCausalLM).from_pretrained`` replaced: the keyword arguments of each call, and its model."""
    from transformers import AutoModel, AutoModelForCausalLM

    calls: list[dict] = []

    def load(name, **kwargs):
        calls.append(kwargs)
        return _Loaded(), {"missing_keys": [], "mismatched_keys": []}

    for loader in (AutoModel, AutoModelForCausalLM):
        monkeypatch.setattr(loader, "from_pretrained", staticmethod(load))
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return calls


@pytest.mark.parametrize("device,device_map,placement,moved", [
    ("cpu", None, None, True),  # on the CPU as transformers loads it
    ("cpu", "auto", None, True),  # nothing to spread over
    ("cuda:1", None, {"": "cuda:1"}, False),  # straight onto the rank's GPU, never whole in host memory
    ("cuda:1", "none", {"": "cuda:1"}, False),
    ("cuda:0", "auto", "auto", False),  # across every GPU the process sees
])
def test_the_lm_is_loaded_straight_onto_its_device(from_pretrained, tiny_opt, device, device_map, placement, moved):
    from pgra.lm.causal_lm import CausalLM

    lm = CausalLM(str(tiny_opt), device=device, dtype="bf16", device_map=device_map)
    model = lm.model
    (kwargs,) = from_pretrained
    assert kwargs.get("device_map") == placement
    assert kwargs["dtype"] == torch.bfloat16 and kwargs["trust_remote_code"] is False
    assert kwargs["attn_implementation"] == ("eager" if device == "cpu" else "sdpa")
    assert model.moved == ([(torch.device(device),)] if moved else [])
    if placement == "auto":
        assert lm.device == model.embed.weight.device  # inputs go where the embeddings are


def test_the_lm_options_device_map_reaches_the_embedder_and_label_scorer(from_pretrained, tiny_opt):
    from pgra.lm.label_scoring import LabelScorer
    from pgra.rerank.config import PromptGuidedConfig
    from pgra.rerank.prompt_guided.embedder import LMEmbedder

    settings = {**PromptGuidedConfig(device_map="auto").lm_settings(), "device": "cuda:0", "dtype": "bf16"}
    assert "device_map" not in PromptGuidedConfig().lm_settings()  # the default adds nothing
    for cls in (LMEmbedder, LabelScorer):
        assert cls(str(tiny_opt), **settings).model.moved == []  # placed by from_pretrained, never moved
    assert [c["device_map"] for c in from_pretrained] == ["auto", "auto"]


def test_device_map_auto_with_several_ranks_on_the_node_is_refused(from_pretrained, tiny_opt, monkeypatch):
    from pgra.lm.causal_lm import CausalLM

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with pytest.raises(InputError, match="^field 'device_map': device_map auto spreads the LM over every GPU"):
        CausalLM(str(tiny_opt), device="cuda:0", dtype="bf16", device_map="auto")
    CausalLM(str(tiny_opt), device="cuda:0", dtype="bf16")  # one device per rank: as before
    CausalLM(str(tiny_opt), device="cpu", device_map="auto")  # on the CPU auto changes nothing
    with pytest.raises(InputError, match="unknown device_map 'balanced'"):
        CausalLM(str(tiny_opt), device="cpu", device_map="balanced")


def test_a_tiny_lm_loads_and_scores_as_before_on_the_cpu(tiny_opt):
    from transformers import AutoModelForCausalLM

    from pgra.lm.causal_lm import CausalLM

    lm = CausalLM(str(tiny_opt), device="cpu", dtype="fp32")
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_opt), dtype=torch.float32,
                                                     attn_implementation="eager").eval()
    ids = torch.as_tensor([lm.ids("The planet orbits the sun")])
    assert lm.model.device.type == "cpu" and lm.device == torch.device("cpu")
    with torch.no_grad():
        # exact: one model's weights loaded two ways, the same kernels on the same input
        torch.testing.assert_close(lm.model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=0)
