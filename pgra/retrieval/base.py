"""The interface of a first-stage retriever, its registry and the config it is built from (:class:`IndexConfig`).

A retriever is one file: a :class:`Retriever` subclass whose options are a section of :class:`IndexConfig`
(``dense.*``, ``bm25.*``); nothing outside ``pgra.retrieval`` asks which retriever it has, it asks the retriever."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..core.config import check_config, option
from ..core.errors import InputError
from ..core.registry import Registry
from ..data.corpus import CorpusOptions, CorpusSource

if TYPE_CHECKING:
    from ..data.corpus import CorpusStore
    from ..runtime.distributed import DistContext

INDEX_KIND = "index"  # the manifest kind of an index folder


@dataclass(frozen=True)
class QueryEncoder:
    """The sentence encoder a retriever embeds queries with (and the settings it runs it at)."""

    encoder: str
    pooler: str
    max_length: int
    batch_size: int


@dataclass(frozen=True)
class LoadOptions:
    """How a caller loads an index (``trust_remote_code``: the caller's own permission; a manifest never gives it)."""

    encoder: str | None = None
    device: str | None = None
    use_gpu: bool = True
    trust_remote_code: bool = False
    mmap: bool | None = None  # search from disk (None: as the index was built to be loaded)
    ranks: Any = None  # a DistContext whose ranks each hold a part of an index that can be split (None: all of it)


class Searcher(ABC):
    """A built index's retriever, loaded: top-k corpus positions and scores for a batch of queries."""

    spans_ranks: bool = False  # each rank holds a part: every rank must search the same queries together

    @abstractmethod
    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` arrays of shape ``(len(queries), min(k, N))``, best first; a position is
        -1 where fewer than k were found."""

    @property
    def encoder(self) -> Any:
        """The query encoder (a :class:`~pgra.retrieval.encoder.DenseEncoder`) of a retriever that has one."""
        raise InputError(f"a {type(self).__name__} has no query encoder", field="retriever")


class Retriever(ABC):
    """One kind of first-stage retriever, configured by an :class:`IndexConfig`.

    Building: :meth:`validate`, :meth:`prepare`, :meth:`key_fields`, :meth:`build`; loading: :meth:`load` gives the
    :class:`Searcher`; the other methods answer what callers would otherwise ask its name for."""

    name: ClassVar[str] = ""  # the config's ``retriever`` value and the manifest's
    title: ClassVar[str] = ""  # how reports name the kind (empty: the name)
    cosine_scores: ClassVar[bool] = False  # its scores are cosines (the leakage audit's near duplicates)
    # what it writes in an index folder, with what a user's folder of that name is not: sub-folder -> (file
    # patterns, description), top-level file -> description, file patterns of its resume state in ``.build/``
    parts: ClassVar[dict[str, tuple[tuple[str, ...], str]]] = {}
    files: ClassVar[dict[str, str]] = {}
    work_files: ClassVar[tuple[str, ...]] = ()
    # the dataclass of its options, declared in its file: the index config's section named after it (``dense.*``)
    options: ClassVar[type | None] = None

    def __init__(self, cfg: IndexConfig) -> None:
        self.cfg = cfg

    def own_options(self) -> Any:
        """Its section of the index config (``cfg.<name>``; its defaults when the config has none)."""
        if self.options is None:
            return None
        return getattr(self.cfg, self.name, None) or self.options()

    # ----- building -----
    def validate(self) -> None:  # noqa: B027 (a hook: nothing to check by default)
        """Refuse settings it cannot build with (an InputError naming the field)."""

    def prepare(self) -> None:  # noqa: B027 (a hook: no models by default)
        """Check, before anything is written, that its models load (and fingerprint them for :meth:`key_fields`)."""

    @abstractmethod
    def key_fields(self) -> dict[str, Any]:
        """Its part of the build key (after :meth:`prepare`): every setting its index depends on."""

    @abstractmethod
    def build(self, store: CorpusStore, out: Path, work: Path, ctx: DistContext) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
        """Write its files for ``store`` into ``out`` (``work``: the resume folder); runs on every process and returns,
        on the main one, the manifest's file records and its own manifest fields."""

    # ----- what callers ask -----
    def display_name(self) -> str:
        """A short name for reports and comparisons (``bm25``, an encoder's folder name)."""
        return self.name

    def search_settings(self) -> dict[str, Any]:
        """The settings deciding which neighbours a query finds, for the keys of runs that search it themselves."""
        return {}

    def query_encoder(self) -> QueryEncoder | None:
        """The sentence encoder it embeds queries with, or None (a lexical retriever)."""
        return None

    def trusts_remote_code(self) -> bool:
        """Whether this config lets its models run their own code."""
        return False

    def estimated_index_bytes(self, sentences: int) -> tuple[float | None, str]:
        """The bytes its index of ``sentences`` will take (not the corpus copy) and how that was reckoned; None with
        the reason where it does not estimate it."""
        return None, "its retriever's size is not estimated"

    # ----- a built index -----
    @classmethod
    @abstractmethod
    def load(cls, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> Searcher:
        """Load the index in ``directory`` (its manifest already read and its files verified)."""

    @classmethod
    def describe(cls, manifest: dict[str, Any]) -> str:
        """One line on a built index (``pgra build-index`` prints it)."""
        return cls.title or cls.name

    @classmethod
    def encoder_of(cls, record: dict[str, Any]) -> tuple[str, str | None] | None:
        """``(encoder, pooler)`` of an index's query encoder from its manifest or ``index`` record; None without one."""
        return None


# the retrievers that ship with pgra, one module each (importing one registers it)
BUILTIN = ("dense_retriever", "bm25_retriever")
RETRIEVERS: Registry[type[Retriever]] = Registry("retriever", __package__, BUILTIN, field="retriever",
                                                 base=Retriever)
register_retriever = RETRIEVERS.register  # add a retriever class under its ``name``; works as a decorator
load_builtin = RETRIEVERS.load_builtin  # import (so register) the built-in retrievers
retriever_names = RETRIEVERS.names  # the registered retrievers' names (the config's choices)


def retriever_class(name: str, field: str = "retriever") -> type[Retriever]:
    """The retriever class registered as ``name``."""
    return RETRIEVERS.part(name, field)


def options_section(name: str) -> type:
    """The type of the index config's section of retriever ``name``, resolved to its :attr:`Retriever.options`
    when a config is read (so the config names no retriever's module)."""

    def section(cls: type) -> type:
        return retriever_class(name).options

    return type(f"{name}_options", (), {"__section__": classmethod(section),
                                        "__doc__": f"The options the '{name}' retriever declares."})


def get_retriever(cfg: IndexConfig) -> Retriever:
    """The retriever an index config describes (its ``retriever`` name, with its settings)."""
    return retriever_class(cfg.retriever)(cfg)


def recorded_retriever(record: dict[str, Any]) -> type[Retriever] | None:
    """The retriever class a manifest or ``index`` record names (None: not registered here)."""
    load_builtin()
    return RETRIEVERS.get(str(record.get("retriever")))


def recorded_encoder(record: dict[str, Any] | None) -> tuple[str, str | None] | None:
    """``(encoder, pooler)`` of a built index's query encoder from its manifest or ``index`` record, or None."""
    cls = recorded_retriever(record) if record else None
    return cls.encoder_of(record) if cls else None


def retriever_title(name: str) -> str:
    """How reports name the retriever ``name`` (itself when it is not registered)."""
    cls = recorded_retriever({"retriever": name})
    return (cls.title or cls.name) if cls else name


# ----- the config of ``pgra build-index`` (and of an experiment's ``index`` section)
DenseSection = options_section("dense")  # the options DenseRetriever declares
BM25Section = options_section("bm25")  # the options BM25Retriever declares


@dataclass
class IndexConfig(CorpusOptions):
    """Everything ``pgra build-index`` needs: the corpus and how to read it, the output folder, the retriever."""

    id_field: str = option("id", help="id field of a JSONL/HF corpus")
    split: str = option("train", help="split of an HF dataset corpus")
    skip_blank_lines: bool = option(False, help="skip blank lines of a txt corpus (ids stay line numbers)")
    out: str = option("", help="index folder to write")
    retriever: str = option("dense", choices=RETRIEVERS.names,
                            help="a registered first-stage retriever: dense (an encoder + faiss), bm25 ...")
    dense: DenseSection = field(default_factory=lambda: retriever_class("dense").options())
    bm25: BM25Section = field(default_factory=lambda: retriever_class("bm25").options())
    overwrite: bool = option(False, help="replace an index or partial build made with other inputs")
    show_progress: bool = option(True, help="progress bars (a line every 30 s in a log)")

    def source(self) -> CorpusSource:
        """The corpus to index."""
        return self.corpus_source(id_field=self.id_field, split=self.split, skip_blank_lines=self.skip_blank_lines)

    def validate(self) -> None:
        """Refuse a config that cannot build (an InputError naming the field)."""
        check_config(self)
        if not self.corpus:
            raise InputError("no corpus given (--corpus)", field="corpus")
        if not self.out:
            raise InputError("no output folder given (--out)", field="out")
        get_retriever(self).validate()  # an unknown name is refused here

    def encoder_defaults(self) -> QueryEncoder:
        """The encoder settings a method that embeds inputs itself starts from (the ``dense`` section's without one)."""
        d = self.dense
        return get_retriever(self).query_encoder() or QueryEncoder("", d.pooler, d.max_length, d.batch_size)

    def trusts_remote_code(self) -> bool:
        """Whether this config lets the index's models run their own code."""
        return get_retriever(self).trusts_remote_code()


_made: dict[tuple[tuple[str, type], ...], type] = {}


def index_config() -> type:
    """:class:`IndexConfig` plus a section for every registered retriever with options and none there (a plug-in's),
    made once per set of sections; IndexConfig itself when there is none."""
    load_builtin()
    static = {f.name for f in fields(IndexConfig)}
    sections = tuple((name, cls.options) for name, cls in RETRIEVERS.items()
                     if cls.options is not None and name not in static)
    if not sections:
        return IndexConfig
    if sections not in _made:
        made = make_dataclass("PluggedIndexConfig", [
            (name, options_section(name), option(default_factory=tp, flag=False, omit_default=True,
                                                  record_default=False, help=f"options of the {name} retriever "
                                                                             f"({name}.FIELD=...)"))
            for name, tp in sections], bases=(IndexConfig,))
        made.__module__, made.__doc__ = __name__, IndexConfig.__doc__
        _made[sections] = made
    return _made[sections]


class IndexSection:
    """The declared type of an experiment's ``index`` section, read as :func:`index_config`."""

    @classmethod
    def __section__(cls) -> type:
        return index_config()


def __getattr__(name: str) -> type:
    if name == "PluggedIndexConfig":  # the made class, by the name it carries
        return index_config()
    raise AttributeError(name)


__all__ = ["BUILTIN", "INDEX_KIND", "RETRIEVERS", "IndexConfig", "IndexSection", "index_config", "LoadOptions", "QueryEncoder", "Retriever", "Searcher",
           "get_retriever", "load_builtin", "options_section", "recorded_encoder", "recorded_retriever", "register_retriever", "retriever_class",
           "retriever_names", "retriever_title"]
