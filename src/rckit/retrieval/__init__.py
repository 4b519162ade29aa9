"""Retrieval for asking many documents (retrieve then read, as DrQA and Haystack do it).

:mod:`rckit.retrieval.store` keeps a folder of documents, cut into passages, in one SQLite file
and finds the passages a question is most likely answered in (BM25); a reader then answers from them.
"""
