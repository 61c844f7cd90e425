"""The `.squad/` filesystem layer: layout, decisions, history, skills, charters, transcripts
(durable writes themselves are `squadd.fsio`).

Nothing here talks to a model or the network; everything above builds on it.
"""
