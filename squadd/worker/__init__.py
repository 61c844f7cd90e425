"""`squadd worker`: runs session jobs of a coordinator's cluster on this host, in its own clone.

`session.py` holds what a session needs to run here and report there (the forwarding
transcript writer, the squad-tool proxies); `process.py` is the worker itself (heartbeat,
slots, job intake, leases, reclaiming).
"""
