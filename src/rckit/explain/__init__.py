"""What a reader looked at, and how training went, drawn: a span reader's explanation as a figure
(:mod:`.png`) or one HTML page (:mod:`.page`), what both share in :mod:`.common`, a file by its suffix
in :mod:`.write` (the explanation itself is the Reader's, :meth:`rckit.answering.reader.Reader.explain`),
a cloze reader's attention computed and drawn (:mod:`.cloze`), and the learning curves and a sweep's
scores (:mod:`.curves`). The span reader's drawings load no PyTorch, and matplotlib only when a PNG is
written; :mod:`.cloze` runs the model (PyTorch) and :mod:`.curves` imports matplotlib."""
