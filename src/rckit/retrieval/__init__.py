"""Retrieval for asking many documents (retrieve then read, as DrQA and Haystack do it).

:mod:`rckit.retrieval.documents` reads a file's documents by its format, :mod:`rckit.retrieval.passages`
cuts them into passages, :mod:`rckit.retrieval.store` keeps the passages of a folder of documents in
one SQLite file and finds those a question is most likely answered in (BM25), and
:mod:`rckit.retrieval.collection` asks a collection: retrieve, read with a reader, rank.
"""
