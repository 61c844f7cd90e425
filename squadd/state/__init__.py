"""The `.squad/` filesystem layer: layout, durable writes, decisions, history, skills, charters.

Nothing here talks to a model or the network; everything above builds on it.
"""
