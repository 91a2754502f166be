"""A plug-in package's module as an entry point names it (``pgra.plugins``): importing it registers its parts."""

from __future__ import annotations

from pgra.methods import register_method
from pgra.rerank.base import register_reranker
from tests.toys.toy_method import Majority
from tests.toys.toy_reranker import Shortest

register_reranker(Shortest)
register_method(Majority)
