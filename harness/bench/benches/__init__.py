"""One module per project exit, each exporting ``SPEC`` (a ``BenchSpec``); discovered, never listed."""
