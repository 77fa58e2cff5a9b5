"""The shipped rule tables (``<name>.csv``), read by ``tracekit.model.rules``; user folders add to them."""
