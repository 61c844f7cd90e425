"""Contracts: the types every layer of squadd may import (events, routes, session views,
provider messages). They import nothing of squadd but `errors` and `untrusted`."""
