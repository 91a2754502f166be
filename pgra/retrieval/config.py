"""The config of ``pgra build-index`` (and of an experiment's ``index`` section): the corpus, the output folder,
the retriever's name and one settings section per built-in retriever (``dense.*``, ``bm25.*``), whose options each
retriever declares on itself (:attr:`~pgra.retrieval.base.Retriever.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import choices
from ..config import check_config, option
from ..corpus import CorpusOptions, CorpusSource
from ..errors import InputError
from .base import QueryEncoder, get_retriever, options_section, retriever_class

DenseSection = options_section("dense")  # the options DenseRetriever declares
BM25Section = options_section("bm25")  # the options BM25Retriever declares


@dataclass
class IndexConfig(CorpusOptions):
    """Everything ``pgra build-index`` needs (YAML in ``configs/``; CLI flags override): the corpus
    (:class:`pgra.corpus.CorpusOptions`, shared with SimCSE training) and how to read it, the output folder, the
    retriever."""

    id_field: str = option("id", help="id field of a JSONL/HF corpus")
    split: str = option("train", help="split of an HF dataset corpus")
    skip_blank_lines: bool = option(False, help="skip blank lines of a txt corpus (ids stay line numbers)")
    out: str = option("", help="index folder to write")
    retriever: str = option("dense", choices=choices.retrievers,
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
        """The encoder settings a method that embeds inputs itself (the linear probe) starts from: the retriever's
        query encoder, or (a retriever without one) no encoder with the ``dense`` section's other settings."""
        d = self.dense
        return get_retriever(self).query_encoder() or QueryEncoder("", d.pooler, d.max_length, d.batch_size)

    def trusts_remote_code(self) -> bool:
        """Whether this config lets the index's models run their own code."""
        return get_retriever(self).trusts_remote_code()


__all__ = ["IndexConfig"]
