"""The measurement half of warpgauge: suites, the operator registry (``operators/``), the modes
(``modes/``: fwd, fwd_bwd, host, accuracy, plans), gates, timing, statistics, ceilings and the
runner behind ``warpgauge bench``. Data flows one way:

    suite -> registry -> providers -> gates -> timing -> stats -> artifacts -> report

Modules import torch only where they need it; importing this package does no work.
"""
