"""Turning the bytes of one kind of document into clean text: ``(title, text, regions)``.

One module per family of formats: :mod:`.headings` (the sections of Markdown and reStructuredText,
whose text is kept as it is), :mod:`.html` (HTML pages and EPUB books), :mod:`.pdf` (a PDF's text
layer, page by page) and :mod:`.word` (Word's ``.docx``). They know nothing of the index: the
format table, the documents and the refusals are :mod:`rckit.retrieval.documents`'. Each imports
its library (lxml, pypdf, python-docx: the ``rckit[documents]`` extra) only when a file is read.
"""
