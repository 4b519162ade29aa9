"""Work after training on more than one machine: answering files of questions and indexing
folders on a Ray cluster (``--ray``; ``pip install 'rckit[ray]'``). The local path never imports Ray."""
