"""The Redis Streams backend that lets `squadd worker`s on other hosts share one pool and one
event bus: wire models, stream and key names, the connection with its bounded reconnects, the
job streams, the request channel, worker heartbeats and the event stream.

It sits below the runtime and knows nothing of sessions: the coordinator (`squadd.daemon`)
and the worker (`squadd.worker`) drive it.
"""
