"""Cloze data (Hermann et al. 2015): examples, readers and tensors (:mod:`.examples`), a dataset
ready to train on (:mod:`.dataset`), the symbolic baselines (:mod:`.baselines`), a synthetic task
(:mod:`.synthetic`) and an entity-anonymised cloze set built from SQuAD (:mod:`.from_squad`)."""
