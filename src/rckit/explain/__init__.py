"""What a reader looked at, and how training went, drawn: a span reader's explanation as a figure
or one HTML page (:mod:`.figure`; the explanation itself is the Reader's,
:meth:`rckit.answering.reader.Reader.explain`), a cloze reader's attention computed and drawn
(:mod:`.cloze`), and the learning curves and a sweep's scores (:mod:`.curves`). Importing a module
here loads no PyTorch; matplotlib only when it draws a PNG."""
