"""flo-redis benchmarks: ``python -m benchmarks`` (``--help`` for the options).

Measured, not asserted: nothing here runs in the test suite except a smoke test that the
entry point works. Results go to ``benchmarks/results/latest.json``.
"""
